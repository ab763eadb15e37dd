"""The telemetry loop's tuning, in one frozen value (operator-wide, not part of any spec).

Each number says what it trades. Defaults suit a pool serving a few
requests per second with a 60 s interval; ``Config.telemetry`` overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TelemetrySettings:
    """Thresholds of the estimate, the push and the drift tests."""

    prior_weight: float = 200.0
    """Pseudo-counts the profile's acceptance is worth per position: a position
    reached a few times stays near the prior, one reached thousands of times
    follows the traffic."""
    design_effect: float = 4.0
    """Counts per effective independent sample: the tokens of one request are
    correlated (one prompt, one topic), so n reached positions carry about
    n / design_effect independent draws. Conservative by choice."""
    confident_half_width: float = 0.05
    """Largest 95% half-width of a_1 for the live estimate to be trusted (deeper
    positions lean on the prior through the blend)."""
    min_reached: float = 200.0
    """Reached positions a window needs at position 1 before it says anything."""
    push_margin: float = 0.02
    """Predicted throughput gain a new table must show over the one in force
    (the runtime's switch margin idea, at table scale): no thrashing."""
    record_tolerance: float = 0.02
    """Acceptance movement (absolute) below which status keeps its recorded view:
    a quiet interval writes nothing."""
    acceptance_drift: float = 0.05
    """Live a_i this far from the profile's (and beyond its interval): the workload changed."""
    cost_drift: float = 0.15
    """Live step time over the profile's prediction beyond 1 +- this: the hardware changed."""
    cost_drift_intervals: int = 3
    """Consecutive drifting intervals (each with enough steps) before re-profiling."""
    cost_min_steps: float = 200.0
    """Clean decode steps a (batch bucket, K) cell needs to count in the cost test."""
    cost_prior_steps: float = 500.0
    """Pseudo-steps at ratio 1.0 that shrink the live cost correction of the table."""
    live_plain_remainder_ms: float = 0.2
    """What a K=0 step spends beyond a plain step and the drafter's pass with the
    add-on's plugin (the speculative metadata, the KV lookahead slots, the
    scheduler's bookkeeping): at most 0.2 ms measured on the CPU engine
    (``bench/results/k0_anatomy.md``). R's cost uncertainty where the pods timed
    plain decoding's step (``estimate.live_plain``) is this over the plain step,
    plus the means' sampling error (``step_cv``, ``step_rho``)."""
    step_cv: float = 0.16
    """Step-to-step coefficient of variation of a clean step's time (fitted on the
    shipped CPU profile's raw runs, ``bench/search_noise.py``; a GPU's steps vary
    less, so this errs wide): with ``step_rho``, the sampling error of a live mean."""
    step_rho: float = 0.72
    """Lag-1 autocorrelation of clean step times (the same fit): fewer independent
    steps than steps counted."""
    stale_intervals: float = 2.0
    """A series whose newest sample is older than this many intervals (+ 15 s) is stale."""
    timeout_seconds: float = 10.0
    """Per query, connect to last byte."""
    max_response_bytes: int = 8 << 20
    """A larger answer is refused (a misconfigured selector, not telemetry)."""
    max_concurrency: int = 4
    """Queries in flight at once against one Prometheus."""


DEFAULT_SETTINGS = TelemetrySettings()
