"""A load ramp: stages of (duration, concurrency) run back to back (no I/O).

Why: an autoscaler is only seen working when load grows and then shrinks,
so a run must be able to ask for 2 workers, then 16, then 2 again, and say
afterwards what it asked for when. ``--ramp "30s@2,60s@16,60s@2"`` is that
schedule: each stage is ``DURATION@CONCURRENCY``, the duration in seconds
with an optional ``s``, ``m`` or ``ms`` suffix. A stage may ask for 0 workers
(a pause, to watch a pool shrink to its minimum); the peak must be at least 1.

The closed loop keeps ``peak`` workers; worker ``w`` starts requests only
while the current stage asks for more than ``w`` workers. A stage that asks
for fewer lets the requests in flight finish (each bounded by its timeout):
nothing is cancelled to step down, as a real client population thins out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_STAGES = 100
"""More stages than anyone types; bounds the schedule the JSON repeats."""

_STAGE = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m)?\s*@\s*(?P<workers>\d+)\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


class RampError(ValueError):
    """A ramp that cannot be parsed or is out of bounds (the message names no flag)."""


@dataclass(frozen=True)
class Stage:
    """``duration_s`` seconds at ``concurrency`` workers."""

    duration_s: float
    concurrency: int


def parse_ramp(text: str) -> tuple[Stage, ...]:
    """``"30s@2,60s@16"`` as stages; ``RampError`` saying which stage is wrong otherwise."""
    if not text.strip():
        raise RampError("expected DURATION@CONCURRENCY[,...], e.g. 30s@2,60s@16,60s@2")
    parts = text.split(",")
    if len(parts) > MAX_STAGES:
        raise RampError(f"at most {MAX_STAGES} stages (got {len(parts)})")
    return tuple(_stage(i, part) for i, part in enumerate(parts, start=1))


def _stage(number: int, text: str) -> Stage:
    match = _STAGE.match(text)
    if match is None:
        raise RampError(
            f"stage {number} {text.strip()!r}: expected DURATION@CONCURRENCY "
            "(a number of seconds, optionally with s, m or ms, e.g. 30s@4)"
        )
    seconds = float(match["value"]) * _UNIT_S[match["unit"]]
    return Stage(duration_s=seconds, concurrency=int(match["workers"]))


def format_ramp(stages: Sequence[Stage]) -> str:
    """The ``--ramp`` text for ``stages`` (what the summary prints)."""
    return ",".join(f"{s.duration_s:g}s@{s.concurrency}" for s in stages)


def total_s(stages: Sequence[Stage]) -> float:
    return sum(s.duration_s for s in stages)


def peak(stages: Sequence[Stage]) -> int:
    return max((s.concurrency for s in stages), default=0)


def concurrency_at(stages: Sequence[Stage], t: float) -> int:
    """The workers asked for at ``t`` seconds into the run (0 outside it)."""
    if t < 0:
        return 0
    end = 0.0
    for stage in stages:
        end += stage.duration_s
        if t < end:
            return stage.concurrency
    return 0


def next_active_s(stages: Sequence[Stage], worker: int, t: float) -> float | None:
    """The earliest time >= ``t`` at which ``worker`` may start a request; None if never again."""
    start = 0.0
    for stage in stages:
        end = start + stage.duration_s
        if end > t and stage.concurrency > worker:
            return max(start, t)
        start = end
    return None


def mean_concurrency(stages: Sequence[Stage], start: float, end: float) -> float:
    """The workers asked for, averaged over ``[start, end)`` (a bucket across a stage boundary)."""
    if end <= start:
        return float(concurrency_at(stages, start))
    weighted, at = 0.0, 0.0
    for stage in stages:
        stage_end = at + stage.duration_s
        overlap = min(end, stage_end) - max(start, at)
        if overlap > 0:
            weighted += overlap * stage.concurrency
        at = stage_end
    return weighted / (end - start)
