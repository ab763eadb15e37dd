"""Tuning knobs of the adaptive K policy, with the reasons for their defaults.

Kept apart from the policy so that the add-on, the simulator and the operator
can build, log and compare configurations without importing the machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AdaptiveConfig:
    """Every knob of ``AdaptivePolicy``; invalid values raise ValueError naming the field.

    Time is counted in engine steps, the only clock the scheduler has for free.
    """

    recompute_interval: int = 64
    """Observed steps between two recomputations of the best-K table. The table
    costs tens of microseconds; every 64 steps keeps it under a microsecond per
    step while following drift within a fraction of a second."""

    bs_smoothing: float = 0.25
    """Weight of the newest batch size in the batch-size EMA (1.0: no smoothing).
    Prefill joins and finishing requests jitter the count by a few every step
    (vLLM #49548); 0.25 averages over ~4 steps, so a +-2 jitter moves the
    smoothed value by well under one."""

    switch_margin: float = 0.03
    """Relative predicted goodput gain a new K needs over the current one.
    Neighbouring K values are within 1-2% of each other near a threshold, and
    every switch costs (CUDA graph shapes, drafter state): 3% keeps switches to
    real gains."""

    min_dwell_steps: int = 8
    """Steps a K is kept after a switch before the next ordinary switch; a
    current K predicted worse than K=0 by more than the margin is left at once
    regardless (never slower than plain decoding)."""

    acceptance_half_life_tokens: float = 4000.0
    """Drafts at a position after which older counts there weigh half: the
    estimate keeps at most ~5800 effective samples (+-0.7% at a = 0.5) and
    follows drift faster the more traffic there is. With the step clock below,
    position 1 at batch size 16 has a half-life of ~140 steps."""

    acceptance_half_life_steps: float = 1000.0
    """Steps after which counts weigh half regardless of traffic (~10-60 s of
    serving), so a position the current K no longer drafts returns to the
    (drift-shifted) prior instead of keeping a stale estimate."""

    acceptance_prior_weight: float = 64.0
    """Pseudo-drafts per position the profile's acceptance is worth."""

    share_acceptance_drift: bool = True
    """Shift the prior of every position by the drift (in log-odds) measured on
    the observed positions. Without it, positions beyond the K in use fall back
    on the profile as their counts decay, and a policy that moved down after
    acceptance fell would be lured back up by the stale prior."""

    itl_half_life_steps: float = 2000.0
    """Steps after which live step-time observations weigh half."""

    itl_prior_weight: float = 4.0
    """Pseudo-steps the shared (neighbouring, per-K, global) correction is worth
    against a cell's own observations. Step times are far less noisy than
    acceptance, so a few steps of a cell are enough to trust it; a small weight
    also lets the rare exploration steps correct a K that is not in use."""

    itl_global_share: float = 0.5
    """Part (in log space) of the global step-time deviation that a K with no
    evidence of its own inherits; see ``ItlCorrector``."""

    itl_correction_min: float = 0.5
    """Lower bound of any step-time correction factor (and of one step's ratio)."""

    itl_correction_max: float = 2.0
    """Upper bound of any step-time correction factor (and of one step's ratio):
    one outlier step (a long prefill, a GC pause) moves an estimate by a
    bounded amount."""

    explore_interval: int = 4000
    """Mean steps between two exploration steps (0 disables exploration). The
    actual gaps are drawn in [0.75, 1.25] x interval, so at most 1 step in
    3000 explores. Every exploration is two K changes (there and back), and a
    K change costs a CUDA-graph switch, so the default keeps exploration
    under one K change per 1,000 steps; acceptance drift is followed without
    it (observed positions move the prior of unobserved ones)."""

    explore_max_loss: float = 0.10
    """A K is explored only if its predicted goodput is within this fraction of
    the current K's: exploration costs at most interval^-1 x this (0.1%)."""

    explore_min_staleness: int = 400
    """A K observed fewer steps ago than this is fresh and never explored."""

    seed: int = 0
    """Seed of the exploration schedule's jitter (runs are reproducible)."""

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ValueError("; ".join(problems))


def _problems(c: AdaptiveConfig) -> list[str]:
    """Every out-of-range field, each message starting with the field's name."""
    found = []
    positive = {
        "recompute_interval": c.recompute_interval,
        "acceptance_half_life_tokens": c.acceptance_half_life_tokens,
        "acceptance_half_life_steps": c.acceptance_half_life_steps,
        "itl_half_life_steps": c.itl_half_life_steps,
        "itl_correction_max": c.itl_correction_max,
        "itl_correction_min": c.itl_correction_min,
        "acceptance_prior_weight": c.acceptance_prior_weight,
        "itl_prior_weight": c.itl_prior_weight,
    }
    non_negative = {
        "switch_margin": c.switch_margin,
        "min_dwell_steps": c.min_dwell_steps,
        "explore_interval": c.explore_interval,
        "explore_min_staleness": c.explore_min_staleness,
    }
    for name, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            found.append(f"{name} must be > 0, got {value}")
    for name, value in non_negative.items():
        if not (math.isfinite(value) and value >= 0):
            found.append(f"{name} must be >= 0, got {value}")
    if not 0.0 < c.bs_smoothing <= 1.0:
        found.append(f"bs_smoothing must be in (0, 1], got {c.bs_smoothing}")
    if not 0.0 <= c.itl_global_share <= 1.0:
        found.append(f"itl_global_share must be in [0, 1], got {c.itl_global_share}")
    if not 0.0 <= c.explore_max_loss < 1.0:
        found.append(f"explore_max_loss must be in [0, 1), got {c.explore_max_loss}")
    if c.itl_correction_min > 1.0 or c.itl_correction_max < 1.0:
        found.append(
            "itl_correction_min/itl_correction_max must bracket 1.0, got "
            f"[{c.itl_correction_min}, {c.itl_correction_max}]"
        )
    return found
