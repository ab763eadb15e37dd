"""The KWOK stages that give fake nodes and pods their lifecycle, and the harness's gates.

KWOK plays the kubelet's status updates: nodes become Ready and renew their
leases, scheduled pods become Running and Ready, Job pods complete, deleted
pods go away. Two annotations are the harness's levers (``kwok-stages.yaml``
documents the stage side):

- ``RUN_LOCALLY``: a pod the kubelet stand-in runs; KWOK does not complete it.
- ``EXIT_CODE`` (+ ``TERMINATION_MESSAGE``): set on a Running pod, KWOK ends its
  containers with that code and message. The stand-in sets it with the real
  exit code of the command; a test may set it by hand to make any pod "exit".
"""

from __future__ import annotations

from pathlib import Path

RUN_LOCALLY = "specdeploy.io/run-locally"
EXIT_CODE = "specdeploy.io/exit-code"
TERMINATION_MESSAGE = "specdeploy.io/termination-message"

STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")


def write_config(path: Path) -> Path:
    """Write KWOK's --config file: the stages, nothing else (defaults for the rest)."""
    path.write_text(STAGES_FILE.read_text())
    return path


def exit_annotations(code: int, message: str) -> dict[str, str]:
    """The annotations that make KWOK terminate a Running pod's containers."""
    # The API caps a termination message at 4096 bytes; keep the tail, where errors are.
    return {EXIT_CODE: str(code), TERMINATION_MESSAGE: message[-4096:]}
