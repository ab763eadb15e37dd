"""What the trained test models share: their log, their report, their command.

``drafts`` (a distilled draft model) and ``eagle`` (an EAGLE head) are both
trained once on CPU and cached; each records what training reached in the
folder's marker file, logs progress to stderr and has a ``python -m``
command that trains (once) and prints the folder, then the report.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from e2e.models import smollm2


def log(model: str, message: str) -> None:
    """Progress on stderr (stdout carries the folder, for ``$(python -m ...)``)."""
    print(f"{model}: {message}", file=sys.stderr, flush=True)


def report(folder: Path) -> dict[str, Any]:
    """What training recorded in the marker: acceptance per position, minutes, recipe."""
    data: dict[str, Any] = json.loads((folder / smollm2.MARKER).read_text())
    return data


def rates(accepted: Sequence[int], tried: Sequence[int]) -> list[float]:
    """Conditional acceptance per position from counts (0 where nothing was tried)."""
    return [a / t if t else 0.0 for a, t in zip(accepted, tried, strict=True)]


def main(
    model: str,
    prepare: Callable[[Path, Path | None], Path],
    unavailable: tuple[type[Exception], ...],
    argv: list[str] | None = None,
) -> int:
    """Train (once) on the converted target, print the folder and its report; 3 if it cannot."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else None
    try:
        target = smollm2.ensure_checkpoint(root)
        folder = prepare(target, root)
    except Exception as err:
        if not isinstance(err, (smollm2.ModelUnavailable, *unavailable)):
            raise
        print(f"{model}: {err}", file=sys.stderr)
        return 3
    print(folder)
    print(json.dumps(report(folder), indent=2))
    return 0
