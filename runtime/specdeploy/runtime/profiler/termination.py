"""The termination-message file: the one line the operator shows as the reason.

Kubernetes copies the file at ``terminationMessagePath`` (default
``/dev/termination-log``) into the container's terminated state, at most
4096 bytes. The operator reads it to say *why* a profiling Job failed. Off a
pod (a laptop, CI) the directory usually does not exist, and then there is
nothing to write: that is not an error.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_PATH = Path("/dev/termination-log")
MAX_BYTES = 4096
"""The kubelet keeps no more than this of the message."""


def one_line(reason: str, *, limit: int = MAX_BYTES) -> str:
    """``reason`` on one line (whitespace runs collapsed), cut to ``limit`` UTF-8 bytes."""
    line = " ".join(reason.split())
    data = line.encode("utf-8")
    if len(data) <= limit:
        return line
    return data[: limit - 3].decode("utf-8", errors="ignore") + "..."


def write_termination_message(reason: str, path: Path | None = DEFAULT_PATH) -> bool:
    """Write ``reason`` as one line; False (silently) when there is nowhere to write.

    Never raises: a failure to report a failure must not hide the failure.
    """
    if path is None or not path.parent.is_dir():
        return False
    try:
        path.write_text(one_line(reason, limit=MAX_BYTES - 1) + "\n", encoding="utf-8")
    except OSError:
        return False
    return True
