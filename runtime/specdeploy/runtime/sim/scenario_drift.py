"""Acceptance drift: the batch size stays, the traffic changes.

Acceptance falls from about 0.8 to about 0.5 at position 1 halfway through
the run (the preset's curve moved to those levels). The profile, and so the
table, is made on the traffic before the drift (``drift_preset``): the
table keeps the K that was right for the old traffic; the adaptive policy
should re-learn acceptance and get back to the best fixed K for the new
traffic. The oracle switches from the best fixed K before to the
best after at the drift (both found per seed in hindsight). All figures are
modelled (simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.sim.acceptance import Drifting, Profile
from specdeploy.runtime.sim.compare import Comparison, figures
from specdeploy.runtime.sim.engine import AnyPolicy, StepTrace
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.scenario_common import (
    Figures,
    Progress,
    ScenarioOutput,
    over_seeds,
    window_tokens_per_s,
)
from specdeploy.runtime.sim.seeds import SeedFigures
from specdeploy.runtime.sim.workload import ClosedLoop

DRIFT_BEFORE_FIRST = 0.8
DRIFT_AFTER_FIRST = 0.5
RECOVERY_TOLERANCE = 0.02


@dataclass
class StepSwitchK:
    """Oracle for the drift scenario: the best fixed K before, the best after."""

    before: int
    after: int
    switch_step: int
    name: str = "oracle"
    _steps: int = 0

    def choose_k(self, batch_size: int) -> int:
        return self.before if self._steps < self.switch_step else self.after

    def observe(self, step: StepRecord) -> None:
        self._steps += 1


def drift_profiles(nominal: Sequence[float]) -> tuple[Profile, Profile]:
    """Before: the preset's acceptance rescaled so position 1 is ~0.8; after: ~0.5.

    Rescaling keeps the shape of the per-position curve (later positions
    accept less) while moving its level, as a change of traffic does.
    """
    curve = Profile(tuple(nominal)) if nominal and nominal[0] > 0 else Profile((1.0,))
    return curve.scaled(DRIFT_BEFORE_FIRST), curve.scaled(DRIFT_AFTER_FIRST)


def drift_preset(preset: Preset) -> Preset:
    """The preset serving the traffic before the drift: what its profile is made on."""
    before, _ = drift_profiles(preset.acceptance.nominal())
    return replace(preset, name=f"{preset.name}-before-drift", acceptance=before)


def windowed_ratio(trace: StepTrace, start: int, window: int, reference: float) -> list[float]:
    """Throughput of consecutive ``window``-step windows from ``start``, over ``reference``."""
    return [
        window_tokens_per_s(trace, lo, lo + window) / reference
        for lo in range(start, trace.tokens.size - window + 1, window)
    ]


def recovery_steps(ratios: Sequence[float], window: int) -> int | None:
    """Steps after the drift until every later window is within tolerance of the oracle."""
    ok = [r >= 1.0 - RECOVERY_TOLERANCE for r in ratios]
    for i in range(len(ok)):
        if all(ok[i:]):
            return i * window
    return None


def _best_fixed(
    cmp: Comparison, workload: ClosedLoop, acceptance: Profile, seed: int
) -> tuple[int, float]:
    results = {
        k: cmp.run(FixedPolicy(k), workload, seed=seed, table=True, acceptance=acceptance)
        for k in cmp.allowed_k()
    }
    best = max(results, key=lambda k: results[k].tokens_per_s)
    return best, results[best].tokens_per_s


def compare_drift(
    cmp: Comparison,
    batch_size: int,
    policies: Sequence[str],
    *,
    window: int = 250,
    progress: Progress = None,
) -> ScenarioOutput:
    """Run ``2 x steps`` steps with the acceptance drop at the midpoint, on every seed.

    ``cmp.profile`` should be made on ``drift_preset(cmp.preset)`` (the CLI makes it so).
    """
    steps = cmp.settings.steps
    workload = ClosedLoop(batch_size, cmp.preset.workload.prompt, cmp.preset.workload.output)
    before, after = drift_profiles(cmp.preset.acceptance.nominal())
    drift = Drifting(before, after, at=cmp.settings.warmup_steps + steps, clock="steps")
    oracle = {
        seed: (_best_fixed(cmp, workload, before, seed), _best_fixed(cmp, workload, after, seed))
        for seed in cmp.settings.seeds
    }

    def run_one(name: str, seed: int) -> Figures:
        (k_before, _), (k_after, oracle_after) = oracle[seed]
        policy: AnyPolicy | None
        if name == "oracle":
            policy = StepSwitchK(k_before, k_after, cmp.settings.warmup_steps + steps)
        else:
            policy = cmp.build(name)
        table = name in ("table", "adaptive", "oracle")
        r = cmp.run(
            policy, workload, seed=seed, table=table, steps=2 * steps, trace=True, acceptance=drift
        )
        assert r.trace is not None
        ratios = windowed_ratio(r.trace, steps, window, oracle_after)
        tail = window_tokens_per_s(r.trace, 2 * steps - steps // 2)
        k_tail = r.trace.k[-steps // 2 :]
        return figures(
            r,
            recovery_steps=recovery_steps(ratios, window),
            final_ratio_to_oracle=tail / oracle_after,
            k_after_drift=float(k_tail.mean()),
            oracle_k_before=k_before,
            oracle_k_after=k_after,
        )

    rows = over_seeds(
        cmp, policies, run_one, batch_size=batch_size, label="drift: ", progress=progress,
        extra=_drift_extra,
    )  # fmt: skip
    k_before = [oracle[s][0][0] for s in cmp.settings.seeds]
    k_after = [oracle[s][1][0] for s in cmp.settings.seeds]
    info: dict[str, Any] = {
        "name": "drift",
        "batch_size": batch_size,
        "drift_step": steps,
        "steps": 2 * steps,
        "acceptance_before": list(before.per_position),
        "acceptance_after": list(after.per_position),
        "oracle_k_before": max(set(k_before), key=k_before.count),
        "oracle_k_after": max(set(k_after), key=k_after.count),
        "window_steps": window,
        "tolerance": RECOVERY_TOLERANCE,
    }
    return rows, info


def _drift_extra(name: str, runs: list[SeedFigures]) -> dict[str, Any]:
    """Worst seed's recovery (None if any seed never recovered), mean final ratio and K."""
    recoveries = [r.figures["recovery_steps"] for r in runs]
    worst = None if any(x is None for x in recoveries) else max(int(x or 0) for x in recoveries)
    finals = [float(r.figures["final_ratio_to_oracle"] or 0.0) for r in runs]
    ks = [float(r.figures["k_after_drift"] or 0.0) for r in runs]
    return {
        "recovery_steps": worst,
        "final_ratio_to_oracle": round(sum(finals) / len(finals), 4),
        "k_after_drift": round(sum(ks) / len(ks), 4),
    }
