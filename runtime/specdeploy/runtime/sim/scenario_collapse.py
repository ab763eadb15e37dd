"""Acceptance collapse: the traffic stops matching the drafter at all.

A closed loop at one batch size; at ``COLLAPSE_STEP`` counted steps the
acceptance drops from the preset's to 0.02 at every position (a new
tenant, a prompt format the draft never saw). Every draft is now wasted
work: inside a pod with speculation configured the best a policy can do is
K=0, which still pays the drafter's K=0 pass and the speculation
bookkeeping; only a restart without speculation (vanilla, reported beside
it) removes those.

Figures per seed: steps from the collapse to the first K=0, the share of
later steps at K > 0, tokens per engine second after the collapse (from
``SETTLE_STEPS`` after it, so the reaction time is not counted twice), and
the policy's predicted gain over plain decoding at the end (the
``specdeploy_predicted_gain_over_vanilla`` a pod exports: what tells the
operator a restart without speculation would pay).
All figures are modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specdeploy.runtime.sim.acceptance import Drifting, Profile
from specdeploy.runtime.sim.compare import TABLE_POLICIES, Comparison, figures
from specdeploy.runtime.sim.scenario_common import (
    Figures,
    Progress,
    ScenarioOutput,
    over_seeds,
    window_tokens_per_s,
)
from specdeploy.runtime.sim.workload import ClosedLoop

COLLAPSED_RATE = 0.02
COLLAPSE_STEP = 2000
AFTER_STEPS = 6000
SETTLE_STEPS = 300
"""The reaction time a policy gets: K=0 is expected within this many steps."""


def compare_collapse(
    cmp: Comparison,
    batch_size: int,
    policies: Sequence[str],
    *,
    progress: Progress = None,
) -> ScenarioOutput:
    """Run ``COLLAPSE_STEP + AFTER_STEPS`` counted steps with the collapse in between."""
    preset = cmp.preset
    good = Profile(tuple(preset.acceptance.nominal()))
    bad = Profile(tuple(COLLAPSED_RATE for _ in good.per_position))
    at = cmp.settings.warmup_steps + COLLAPSE_STEP
    acceptance = Drifting(good, bad, at=at, clock="steps")
    workload = ClosedLoop(batch_size, preset.workload.prompt, preset.workload.output)
    total = COLLAPSE_STEP + AFTER_STEPS

    def run_one(name: str, seed: int) -> Figures:
        name = cmp.resolve(name, workload)
        policy = cmp.build(name)
        r = cmp.run(
            policy,
            workload,
            seed=seed,
            table=name in TABLE_POLICIES,
            steps=total,
            trace=True,
            acceptance=acceptance,
        )
        assert r.trace is not None
        judged = getattr(policy, "gain_over_vanilla", None)
        gain = judged(batch_size) if judged is not None else None
        k = r.trace.k[COLLAPSE_STEP:]
        zero = np.flatnonzero(k == 0)
        first = int(zero[0]) if zero.size else None
        later = k[first:] if first is not None else k
        return figures(
            r,
            first_k0_after_steps=first,
            share_k_above_0_after=float(np.mean(later > 0)),
            tokens_per_s_after=window_tokens_per_s(r.trace, COLLAPSE_STEP + SETTLE_STEPS),
            gain_over_vanilla_after=None if gain is None else round(gain, 4),
        )

    rows = over_seeds(
        cmp, policies, run_one, batch_size=batch_size, label="collapse: ", progress=progress
    )
    info: dict[str, Any] = {
        "name": "collapse",
        "batch_size": batch_size,
        "collapse_step": COLLAPSE_STEP,
        "steps": total,
        "settle_steps": SETTLE_STEPS,
        "acceptance_before": list(good.per_position),
        "acceptance_after": list(bad.per_position),
        "profile_gain_over_vanilla": cmp.floor(workload).gain,
    }
    return rows, info
