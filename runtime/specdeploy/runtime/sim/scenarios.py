"""The two stress scenarios of the benchmark: acceptance drift and batch-size oscillation.

* drift: batch size fixed, acceptance falls from about 0.8 to about 0.5
  halfway through the run. A static table keeps the K that was right for
  the old traffic; the adaptive policy should re-learn acceptance and get
  back to the best fixed K for the new traffic.
* oscillate: the scheduled batch size swings +-2 around a batch size where
  the static table changes K. vLLM's per-step lookup flips K at every swing
  (vLLM #49548); hysteresis should hold K still without losing goodput.

All figures are modelled (simulator).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specdeploy.runtime.policy import static_lookup
from specdeploy.runtime.policy.base import KPolicy, StepRecord
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.sim.acceptance import Drifting, Profile
from specdeploy.runtime.sim.compare import Comparison, PolicyResult
from specdeploy.runtime.sim.engine import SimResult, StepTrace
from specdeploy.runtime.sim.workload import ClosedLoop, OscillatingLoop

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
    first = nominal[0] if nominal and nominal[0] > 0 else 1.0

    def scaled(level: float) -> Profile:
        return Profile(tuple(min(0.99, round(a * level / first, 4)) for a in nominal))

    return scaled(DRIFT_BEFORE_FIRST), scaled(DRIFT_AFTER_FIRST)


def windowed_ratio(trace: StepTrace, start: int, window: int, reference: float) -> list[float]:
    """Throughput of consecutive ``window``-step windows from ``start``, over ``reference``."""
    ratios = []
    for lo in range(start, trace.tokens.size - window + 1, window):
        tokens = float(trace.tokens[lo : lo + window].sum())
        seconds = float(trace.seconds[lo : lo + window].sum())
        ratios.append(tokens / seconds / reference)
    return ratios


def recovery_steps(ratios: Sequence[float], window: int) -> int | None:
    """Steps after the drift until every later window is within tolerance of the oracle."""
    ok = [r >= 1.0 - RECOVERY_TOLERANCE for r in ratios]
    for i in range(len(ok)):
        if all(ok[i:]):
            return i * window
    return None


def _best_fixed(cmp: Comparison, workload: ClosedLoop, acceptance: Profile) -> tuple[int, float]:
    results = {
        k: cmp.run(FixedPolicy(k), workload, acceptance=acceptance).tokens_per_s
        for k in cmp.allowed_k()
    }
    best = max(results, key=lambda k: results[k])
    return best, results[best]


def compare_drift(
    cmp: Comparison,
    batch_size: int,
    policies: Sequence[str],
    *,
    window: int = 250,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[PolicyResult], dict[str, Any]]:
    """Run ``2 x steps`` steps with the acceptance drop at the midpoint."""
    steps = cmp.settings.steps
    workload = ClosedLoop(batch_size, cmp.preset.workload.prompt, cmp.preset.workload.output)
    before, after = drift_profiles(cmp.preset.acceptance.nominal())
    drift = Drifting(before, after, at=cmp.settings.warmup_steps + steps, clock="steps")
    k_before, _ = _best_fixed(cmp, workload, before)
    k_after, oracle_after = _best_fixed(cmp, workload, after)
    rows = []
    for name in policies:
        if progress:
            progress(f"drift at batch size {batch_size}: {name}")
        policy: KPolicy | None
        if name == "oracle":
            policy = StepSwitchK(k_before, k_after, cmp.settings.warmup_steps + steps)
        else:
            policy = cmp.build(name)
        r = cmp.run(policy, workload, steps=2 * steps, trace=True, acceptance=drift)
        rows.append(_drift_row(name, batch_size, r, steps, window, oracle_after))
    info = {
        "name": "drift",
        "batch_size": batch_size,
        "drift_step": steps,
        "steps": 2 * steps,
        "acceptance_before": list(before.per_position),
        "acceptance_after": list(after.per_position),
        "oracle_k_before": k_before,
        "oracle_k_after": k_after,
        "oracle_after_tokens_per_s": round(oracle_after, 2),
        "window_steps": window,
        "tolerance": RECOVERY_TOLERANCE,
    }
    return rows, info


def _drift_row(
    name: str, bs: int, r: SimResult, drift_at: int, window: int, oracle_after: float
) -> PolicyResult:
    assert r.trace is not None
    ratios = windowed_ratio(r.trace, drift_at, window, oracle_after)
    tail = r.trace.tokens[-drift_at // 2 :].sum() / r.trace.seconds[-drift_at // 2 :].sum()
    extra = {
        "recovery_steps": recovery_steps(ratios, window),
        "final_ratio_to_oracle": round(float(tail) / oracle_after, 4),
        "k_after_drift": float(np.mean(r.trace.k[-drift_at // 2 :])),
    }
    return PolicyResult(name, bs, r.tokens_per_s, r.mean_k, r.k_changes_per_1000_steps, extra)


def table_threshold(cmp: Comparison, *, near: int | None = None) -> int:
    """A batch size where the static table changes K (the first boundary >= 3).

    The oscillation straddles it: bs - 2 and bs + 2 map to different K.
    """
    lookup = static_lookup(cmp.profile.spec, max_batch_size=cmp.preset.max_batch_size)
    boundaries = [bs for bs in range(3, len(lookup) - 2) if lookup[bs] != lookup[bs - 1]]
    if not boundaries:
        raise ValueError("the preset's table has one K for every batch size: nothing to straddle")
    if near is None:
        return boundaries[0]
    return min(boundaries, key=lambda b: abs(b - near))


def compare_oscillate(
    cmp: Comparison,
    policies: Sequence[str],
    *,
    center: int | None = None,
    amplitude: int = 2,
    period_steps: int = 8,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[PolicyResult], dict[str, Any]]:
    """Scheduled batch size alternating between center-amplitude and center+amplitude."""
    threshold = table_threshold(cmp, near=center)
    workload = OscillatingLoop(
        low=max(1, threshold - amplitude),
        high=threshold + amplitude,
        period_steps=period_steps,
        prompt=cmp.preset.workload.prompt,
        output=cmp.preset.workload.output,
    )
    fixed = {k: cmp.run(FixedPolicy(k), workload) for k in cmp.allowed_k()}
    oracle_k = max(fixed, key=lambda k: fixed[k].tokens_per_s)
    rows = []
    for name in policies:
        if progress:
            progress(f"oscillation around batch size {threshold}: {name}")
        if name == "oracle":
            r = fixed[oracle_k]
            extra: dict[str, Any] = {"oracle_k": oracle_k}
        elif name.startswith("fixed:"):
            r, extra = fixed[int(name.removeprefix("fixed:"))], {}
        else:
            r, extra = cmp.run(cmp.build(name), workload), {}
        rows.append(
            PolicyResult(
                name, r.mean_batch_size, r.tokens_per_s, r.mean_k, r.k_changes_per_1000_steps, extra
            )
        )
    info = {
        "name": "oscillate",
        "threshold": threshold,
        "low": workload.low,
        "high": workload.high,
        "period_steps": period_steps,
        "steps": cmp.settings.steps,
        "oracle_k": oracle_k,
    }
    return rows, info
