"""Drift tests: has the workload changed (acceptance) or the hardware (step cost)?

Acceptance drift re-derives the table from live data and needs no GPU time;
cost drift means the profile's step times no longer describe this hardware
(other clocks, a new driver or engine build), which only re-profiling
fixes. A single bad interval is a blip, so cost drift must hold for
``cost_drift_intervals`` consecutive intervals that each had enough steps;
an interval without enough steps neither extends nor breaks the streak.
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdeploy.operator.telemetry.estimate import AcceptanceEstimate
from specdeploy.operator.telemetry.settings import TelemetrySettings


@dataclass(frozen=True)
class CostStreak:
    """Consecutive drifting intervals, and whether the drift is sustained (sticky)."""

    intervals: int = 0
    sustained: bool = False


def next_streak(before: CostStreak, ratio: float | None, settings: TelemetrySettings) -> CostStreak:
    """The streak after one interval whose pooled live/profile step-time ratio is ``ratio``.

    ``ratio`` None: too few steps to say. Once sustained it stays so until
    the profile changes (the caller drops the streak with the old profile):
    a re-profiling Job already started is not cancelled by a calm interval.
    """
    if ratio is None:
        return before
    drifting = abs(ratio - 1.0) > settings.cost_drift
    intervals = before.intervals + 1 if drifting else 0
    sustained = before.sustained or intervals >= settings.cost_drift_intervals
    return CostStreak(intervals, sustained)


def acceptance_drifted(
    estimate: AcceptanceEstimate, prior: Sequence[float], settings: TelemetrySettings
) -> bool:
    """Whether the confident live a_i left the profile's at a busy position.

    The raw live rate (accepted / reached) is compared, not the blended one
    (which leans toward the prior by construction); the distance must exceed
    both ``acceptance_drift`` and the position's own half-width.
    """
    if not estimate.confident:
        return False
    for i, reached in enumerate(estimate.reached):
        if reached < settings.min_reached or i >= len(prior):
            continue
        live = estimate.accepted[i] / reached
        if abs(live - prior[i]) > max(settings.acceptance_drift, estimate.half_width[i]):
            return True
    return False
