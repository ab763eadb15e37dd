"""The KWOK stages that give fake nodes and pods their lifecycle, and the harness's gates.

KWOK plays the kubelet's status updates: nodes become Ready and renew their
leases, scheduled pods become Running and Ready, Job pods complete, deleted
pods go away. Two annotations are the harness's levers (``kwok-stages.yaml``
documents the stage side):

- ``RUN_LOCALLY``: a pod the kubelet stand-in runs; KWOK does not complete it.
- ``EXIT_CODE`` (+ ``TERMINATION_MESSAGE``): set on a Running pod, KWOK ends its
  containers with that code and message. The stand-in sets it with the real
  exit code of the command; a test may set it by hand to make any pod "exit".
- ``PROBE_PASSED``: a serving pod is Running but not Ready until the stand-in,
  which probes its readiness path as a kubelet would, sets this; KWOK then
  marks it Ready. Without it a rollout (``maxUnavailable: 0``) would stop the
  old pod while the new one still loads, and the Service would have no ready
  endpoint for that moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

RUN_LOCALLY = "specdeploy.io/run-locally"
EXIT_CODE = "specdeploy.io/exit-code"
TERMINATION_MESSAGE = "specdeploy.io/termination-message"
PROBE_PASSED = "specdeploy.io/probe-passed"
PROBED_LABEL = ("specdeploy.io/component", "serving")
"""The pods whose Ready waits for ``PROBE_PASSED`` (``kwok-stages.yaml`` selects them so)."""
PROBED_STAGES = ("pod-start-unready", "pod-probe-passed")
"""The stages that hold a serving pod's Ready back until ``PROBE_PASSED``."""

STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")


def write_config(path: Path, *, probed: bool = True) -> Path:
    """Write KWOK's --config file: the stages, nothing else (defaults for the rest).

    ``probed=False`` (the stand-in's ``--serving=kwok``, where no process answers a
    probe): serving pods are Ready at once, like every other pod."""
    if probed:
        path.write_text(STAGES_FILE.read_text())
        return path
    docs = [d for d in yaml.safe_load_all(STAGES_FILE.read_text()) if d]
    kept = [_ready_at_once(d) for d in docs if d["metadata"]["name"] not in PROBED_STAGES]
    path.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    return path


def _ready_at_once(stage: dict[str, Any]) -> dict[str, Any]:
    """``pod-ready`` without its exclusion of serving pods; any other stage as it is."""
    if stage["metadata"]["name"] == "pod-ready":
        selector = stage["spec"]["selector"]
        selector["matchExpressions"] = [
            e for e in selector["matchExpressions"] if PROBED_LABEL[0] not in e["key"]
        ]
    return stage


def probe_gated(pod: Mapping[str, Any]) -> bool:
    """Whether KWOK holds the pod's Ready back until ``PROBE_PASSED`` (with ``probed``)."""
    key, value = PROBED_LABEL
    return bool((pod.get("metadata", {}).get("labels") or {}).get(key) == value)


def exit_annotations(code: int, message: str) -> dict[str, str]:
    """The annotations that make KWOK terminate a Running pod's containers."""
    # The API caps a termination message at 4096 bytes; keep the tail, where errors are.
    return {EXIT_CODE: str(code), TERMINATION_MESSAGE: message[-4096:]}
