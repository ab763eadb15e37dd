"""Tuning knobs of the adaptive K policy, with the reasons for their defaults.

Kept apart from the policy so that the add-on, the simulator and the operator
can build, log and compare configurations without importing the machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OBJECTIVES = ("throughput", "latency")


@dataclass(frozen=True)
class AdaptiveConfig:
    """Every knob of ``AdaptivePolicy``; invalid values raise ValueError naming the field.

    Time is counted in engine steps, the only clock the scheduler has for free.
    """

    objective: str = "latency"
    """What K maximises. ``latency`` (the default): each step's tokens per
    second per sequence, AL/ITL: per-request TPOT, a draining batch (an RL
    rollout's stragglers) and open-loop serving, where arrivals fix the
    throughput and the time each step takes is what users wait for.
    ``throughput``: the system's tokens per second over a saturated closed
    loop, the Dinkelbach form bs * AL(K) - lambda * ITL(bs, K) with lambda the
    observed tokens/s (equal to the per-step ratio in steady state; when batch
    sizes alternate it gives small steps less K and large steps more). Under
    open-loop load it is the wrong objective: lambda follows the arrivals, and
    the simulator's phased scenario loses 8% mean latency with it (README,
    "How K is chosen")."""

    recompute_interval: int = 64
    """Observed steps between two recomputations of the best-K table. The table
    costs tens of microseconds; every 64 steps keeps it under a microsecond per
    step while following drift within a fraction of a second."""

    bs_smoothing: float = 0.25
    """Weight of the newest batch size in the batch-size EMA (1.0: no smoothing).
    Prefill joins and finishing requests jitter the count by a few every step
    (vLLM #49548); 0.25 averages over ~4 steps."""

    switch_margin: float = 0.005
    """Relative predicted gain a K >= 1 needs over the current K to be switched to.
    Moving toward K=0 needs none: K=0 is the floor the pod can always run, and a
    margin there would let a K that loses to it by less than the margin run for
    good. Between K >= 1 the margin is what a policy settles for: 3% left the
    simulator's drain 0.8% behind the static table (the batch size crosses the
    K=2/K=3 boundary slowly and the gap there stays under 3%); 0.5% stays
    above the jitter of rebuilt estimates (at 0 the oscillating load switched
    16 times per 1,000 steps, at 0.5% under 1). Every switch costs (CUDA graph
    shapes, drafter state)."""

    min_dwell_steps: int = 8
    """Steps a K >= 1 is kept after a switch before the next switch to another K >= 1;
    a switch to K=0 is never held back."""

    acceptance_half_life_tokens: float = 4000.0
    """Reached positions after which older counts there weigh half: ~5800
    effective samples at most (+-0.7% at a = 0.5)."""

    acceptance_prior_weight: float = 64.0
    """Pseudo-trials per position the profile's acceptance (and drafting) is worth."""

    change_z: float = 4.0
    """A batch of new evidence (one ``recompute_interval``) that contradicts a
    rate by more than this many standard errors replaces the old evidence: an
    acceptance collapse is followed within one table rebuild."""

    acceptance_drift_per_step: float = 1e-5
    """Variance a rate's estimate gains per step it goes unobserved (a random
    walk): a K not in use becomes worth exploring again after ~10^3-10^4 steps."""

    cost_prior_weight: float = 16.0
    """Pseudo-steps the profile's cost model is worth against live step timings."""

    cost_half_life_steps: float = 2000.0
    """Timed steps after which older step timings weigh half."""

    throughput_half_life_steps: float = 64.0
    """Timed steps over which the system's tokens/s (the throughput objective's
    lambda) is averaged."""

    explore_budget: float = 0.0004
    """Largest share of steps spent exploring (0 disables exploration)."""

    explore_z: float = 2.0
    """A K is explored when its optimistic goodput (this many standard errors
    better in acceptance and step cost) beats the current K's point estimate."""

    plain_reference_cost: float = 0.0005
    """The plain reference: while a K >= 1 is in force, K=0 runs on as many steps as
    cost this share of the throughput the policy predicts (a K=0 step's predicted loss
    to the K in force times the share of steps), at most ``plain_reference_share``.
    With the add-on's plugin a K=0 step is a plain step (plus a stateful drafter's
    timed pass, ``vllm_addon/k0_pass``): these steps are what this policy's cost model
    learns K=0's price from, and what the operator's live floor prices plain decoding
    by on this very pod (``telemetry.estimate.live_plain``, where they add up to
    enough steps). A pod that never runs K=0 has neither: a profile that prices K=0
    too dear (measurement noise, another machine) keeps a losing K=1 in force after
    an acceptance collapse, and the pool out of the floor's reach (``make
    bench-floor``'s collapse, 3 of 20 draws at stop 50). 0.05%: a fixed 1% of steps
    cost 0.3-0.5% where speculation wins 1.5x or more (``make bench``'s rollout and
    wrong-machine targets failed on it); spent by the loss, the reference runs
    often where K=0 is close and rarely where it is far behind."""

    plain_reference_share: float = 0.01
    """The plain reference's largest share of steps (where K=0 loses little); 0 turns
    the reference off."""

    plain_reference_run: int = 16
    """K=0 steps in a row per reference run. The first after a K change is not a clean
    step (the add-on times only steps whose K did not change) and each run costs two K
    switches: runs of 16 give 15 timed steps for two switches, 2 * share / run: at
    most 1.25 switches per 1,000 steps."""

    seed: int = 0
    """Kept for reproducible configurations (exploration is deterministic)."""

    @property
    def reference_switches_per_1000_steps(self) -> float:
        """The most K switches the plain reference schedules (two per run, at its largest
        share) while a K >= 1 is in force: a bounded cost, not thrash."""
        return 2000.0 * self.plain_reference_share / self.plain_reference_run

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
        "acceptance_prior_weight": c.acceptance_prior_weight,
        "change_z": c.change_z,
        "cost_prior_weight": c.cost_prior_weight,
        "cost_half_life_steps": c.cost_half_life_steps,
        "throughput_half_life_steps": c.throughput_half_life_steps,
    }
    non_negative = {
        "switch_margin": c.switch_margin,
        "min_dwell_steps": c.min_dwell_steps,
        "acceptance_drift_per_step": c.acceptance_drift_per_step,
        "explore_z": c.explore_z,
    }
    for name, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            found.append(f"{name} must be > 0, got {value}")
    for name, value in non_negative.items():
        if not (math.isfinite(value) and value >= 0):
            found.append(f"{name} must be >= 0, got {value}")
    if not 0.0 < c.bs_smoothing <= 1.0:
        found.append(f"bs_smoothing must be in (0, 1], got {c.bs_smoothing}")
    if not 0.0 <= c.explore_budget < 1.0:
        found.append(f"explore_budget must be in [0, 1), got {c.explore_budget}")
    if not (math.isfinite(c.plain_reference_cost) and c.plain_reference_cost >= 0.0):
        found.append(f"plain_reference_cost must be >= 0, got {c.plain_reference_cost}")
    if not 0.0 <= c.plain_reference_share < 0.5:
        found.append(f"plain_reference_share must be in [0, 0.5), got {c.plain_reference_share}")
    if c.plain_reference_run < 2:
        found.append(f"plain_reference_run must be >= 2, got {c.plain_reference_run}")
    if c.objective not in OBJECTIVES:
        found.append(f"objective must be one of {list(OBJECTIVES)}, got {c.objective!r}")
    return found
