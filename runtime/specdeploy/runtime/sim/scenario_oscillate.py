"""Batch-size oscillation around a table threshold: does K thrash?

The scheduled batch size swings +-2 around a batch size where the static
table changes K. vLLM's per-step lookup flips K at every swing (vLLM
#49548), and every flip pays the K-switch cost (``costs.Overheads``);
hysteresis should hold K still without losing goodput. The oracle is the
best fixed K in hindsight per seed, run with a table set. All figures are
modelled (simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specdeploy.runtime.policy import static_lookup
from specdeploy.runtime.sim.compare import Comparison, best_fixed_k, figures
from specdeploy.runtime.sim.scenario_common import (
    Figures,
    Progress,
    ScenarioOutput,
    mean_bs,
    over_seeds,
)
from specdeploy.runtime.sim.workload import OscillatingLoop


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
    progress: Progress = None,
) -> ScenarioOutput:
    """Scheduled batch size alternating between center-amplitude and center+amplitude."""
    threshold = table_threshold(cmp, near=center)
    workload = OscillatingLoop(
        low=max(1, threshold - amplitude),
        high=threshold + amplitude,
        period_steps=period_steps,
        prompt=cmp.preset.workload.prompt,
        output=cmp.preset.workload.output,
    )

    def run_one(name: str, seed: int) -> Figures:
        if name == "oracle":
            k, r = best_fixed_k(cmp, workload, seed=seed, table=True)
            return figures(r, oracle_k=k)
        return figures(cmp.run_named(name, workload, seed=seed))

    rows = over_seeds(
        cmp, policies, run_one, batch_size=mean_bs, label="oscillation: ", progress=progress
    )
    info: dict[str, Any] = {
        "name": "oscillate",
        "threshold": threshold,
        "low": workload.low,
        "high": workload.high,
        "period_steps": period_steps,
        "steps": cmp.settings.steps,
    }
    return rows, info
