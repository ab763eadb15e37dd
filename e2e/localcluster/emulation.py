"""What a pod the operator puts on a fake GPU node runs here: the GPU's stand-in.

A KWOK node has no GPU and runs no containers, so the kubelet stand-in
(``standin.py``) decides per pod what the pod would have done on that GPU,
from the pod alone - never from anything the user's spec adds for the
harness, so a spec written for a real cluster works here unchanged:

* **profiling pods** (``specdeploy profile --backend=vllm ...``) run the same
  command with the ``sim`` backend modelling the node's GPU type
  (``--emulate``: the profile is keyed by the pod's own model, method and
  GPU, and says ``modelled``); the simulator preset that models the pod's
  model and method comes from ``e2e.emulated.catalog.preset_for``, the same
  choice the serving pods make. A profiling pod that already asks for
  ``--backend=sim`` runs as it is;
* **serving pods** (``vllm serve MODEL ...``) run the emulated vLLM server
  (``e2e/emulated``) with the same arguments: the OpenAI API and vLLM's
  metrics, the simulator's step times for that GPU in real time, the real
  add-on choosing K. The container ports cannot all be 8000 on one host, so
  ``--port`` and the add-on's metrics port become free loopback ports, which
  the stand-in publishes on the pod (``LOCAL_HTTP``/``LOCAL_METRICS``
  annotations, read by the gateway) and to Prometheus (file discovery);
* pods marked ``specdeploy.io/run-locally`` run their command unchanged
  (a test's own pods).

Everything else on a fake node is left to KWOK. Pure: no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from e2e.localcluster import stages

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
LOCAL_HTTP = "specdeploy.io/local-http"
"""Pod annotation: ``127.0.0.1:PORT`` where the emulated server's API answers."""
LOCAL_METRICS = "specdeploy.io/local-metrics"
"""Pod annotation: ``127.0.0.1:PORT`` of the add-on's own metrics endpoint."""
LOCAL_PID = "specdeploy.io/local-pid"
"""Pod annotation: the pid of the pod's process (a restart would change it)."""
EMULATED_GPU_ENV = "SPECDEPLOY_EMULATED_GPU"
"""The node's GPU product, for the emulated server."""
METRICS_PORT_ENV = "SPECDEPLOY_METRICS_PORT"
METRICS_ADDR_ENV = "SPECDEPLOY_METRICS_ADDR"
SERVER_MODULE = "e2e.emulated.vllm_serve"


class Kind(StrEnum):
    """What the stand-in does with a pod on a fake GPU node."""

    AS_IS = "as-is"
    PROFILER = "profiler"
    SERVING = "serving"
    NONE = "none"


def kind_of(pod: Mapping[str, Any]) -> Kind:
    """The pod's kind: marked pods as they are, else by their first container's command."""
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(stages.RUN_LOCALLY) == "true":
        return Kind.AS_IS
    containers = pod["spec"].get("containers") or []
    if not containers:
        return Kind.NONE
    line = [*(containers[0].get("command") or []), *(containers[0].get("args") or [])]
    if line[:2] == ["vllm", "serve"]:
        return Kind.SERVING
    if line[:2] == ["specdeploy", "profile"]:
        return Kind.PROFILER
    return Kind.NONE


@dataclass(frozen=True)
class Ports:
    """The loopback ports a serving pod's process gets for its two container ports."""

    http: int
    metrics: int


def profiler_args(args: Sequence[str], gpu_product: str) -> list[str]:
    """``specdeploy profile`` arguments for the node's GPU: vllm becomes the simulator.

    ``--backend=vllm`` becomes ``--backend=sim --emulate --preset=P`` with P the preset
    that models the pod's ``--model`` and ``--method``; ``--gpu-type`` is the node's
    (it already is: the operator pins the Job to that type). Other backends: unchanged.
    """
    flags = _flags(args)
    if flags.get("--backend", "sim") != "vllm":
        return list(args)
    from e2e.emulated.catalog import preset_for

    preset = preset_for(flags.get("--model", ""), flags.get("--method", "ngram"))
    out = [a for a in args if not a.startswith(("--backend=", "--gpu-type="))]
    return [*out, "--backend=sim", "--emulate", f"--preset={preset}", f"--gpu-type={gpu_product}"]


def serving_argv(args: Sequence[str], ports: Ports) -> list[str]:
    """The emulated server's command line: the container's ``vllm serve`` arguments with
    ``--port`` on the pod's loopback port (``args`` excludes ``vllm serve`` itself)."""
    out = [a for a in args if not a.startswith("--port=")]
    return [sys.executable, "-m", SERVER_MODULE, *out, f"--port={ports.http}"]


def serving_env(ports: Ports, gpu_product: str) -> dict[str, str]:
    """What the emulated server needs beside the pod's own env."""
    return {
        METRICS_PORT_ENV: str(ports.metrics),
        METRICS_ADDR_ENV: "127.0.0.1",
        EMULATED_GPU_ENV: gpu_product,
    }


def local_annotations(ports: Ports, pid: int) -> dict[str, str]:
    return {
        LOCAL_HTTP: f"127.0.0.1:{ports.http}",
        LOCAL_METRICS: f"127.0.0.1:{ports.metrics}",
        LOCAL_PID: str(pid),
    }


def gpu_product(node: Mapping[str, Any]) -> str:
    """The node's GPU product label ('' when it has none)."""
    return str((node.get("metadata", {}).get("labels") or {}).get(GPU_PRODUCT_LABEL, ""))


def _flags(args: Sequence[str]) -> dict[str, str]:
    """``--name=value`` flags (the operator's builders always write that form)."""
    found: dict[str, str] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        if sep and name.startswith("--"):
            found[name] = value
    return found
