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
* **the chart's operator pods** (``specdeploy operator ...``: the operator's
  Deployment and the CRD-upgrade hook Job) run their own command, as a
  kubelet would run that container: under the pod's ServiceAccount (its
  bound token, the cluster CA), with the pod's env. ``specdeploy operator
  run`` listens on all addresses at fixed ports in its pod; on one host the
  metrics and liveness ports become free loopback ports (``operator_args``),
  the metrics one announced to Prometheus as job ``specdeploy-operator``;
* pods marked ``specdeploy.io/run-locally`` run their command unchanged
  (a test's own pods).

Everything else on a fake node is left to KWOK. Pure: no I/O.
"""

from __future__ import annotations

import sys
import urllib.parse
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
    OPERATOR = "operator"
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
    if line[:2] == ["specdeploy", "operator"]:
        return Kind.OPERATOR
    return Kind.NONE


def needs_gpu(kind: Kind) -> bool:
    """Whether the kind emulates a GPU, so that its node must have one (the operator's
    own pods run on any node, and a test's marked pods decide for themselves)."""
    return kind in (Kind.PROFILER, Kind.SERVING)


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


OPERATOR_PORT_FLAGS = ("--metrics-port", "--metrics-addr", "--liveness")


def operator_args(args: Sequence[str], ports: Ports) -> list[str]:
    """``specdeploy operator run`` arguments for a process on the host's loopback.

    ``ports.metrics`` replaces the pod's ``--metrics-port`` (unless it is 0: off) and
    ``--metrics-addr`` becomes 127.0.0.1; a ``--liveness`` URL keeps its path on
    ``ports.http``. Both ``--flag=value`` and ``--flag value`` are read, since a chart
    may write either. Other subcommands (the CRD hook's) run unchanged.
    """
    if list(args[:2]) != ["operator", "run"]:
        return list(args)
    flags, rest = _split_flags(args[2:], OPERATOR_PORT_FLAGS)
    out = [*args[:2], *rest]
    if flags.get("--metrics-port") != "0":
        out += [f"--metrics-port={ports.metrics}", "--metrics-addr=127.0.0.1"]
    else:
        out.append("--metrics-port=0")
    if "--liveness" in flags:
        path = urllib.parse.urlsplit(flags["--liveness"]).path or "/healthz"
        out.append(f"--liveness=http://127.0.0.1:{ports.http}{path}")
    return out


def operator_metrics_on(args: Sequence[str]) -> bool:
    """Whether an ``operator_args`` command line serves /metrics (``--metrics-port`` not 0)."""
    return list(args[:2]) == ["operator", "run"] and "--metrics-port=0" not in args


def _split_flags(args: Sequence[str], names: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The values of ``names`` (either form) and the other arguments, in order."""
    found: dict[str, str] = {}
    rest: list[str] = []
    items = iter(args)
    for arg in items:
        name, sep, value = arg.partition("=")
        if name not in names:
            rest.append(arg)
        elif sep:
            found[name] = value
        else:
            found[name] = next(items, "")
    return found, rest


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
