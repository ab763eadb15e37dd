"""Phased open loop: the request rate changes every 10 s, and the batch follows it.

The rates are fractions of what vanilla serving sustains at the preset's
largest batch (``PHASE_LOAD``: light, heavy, light, near saturation,
idle, busy), so every preset sees low and high batch sizes. Arrivals are
drawn ahead per seed (``workload.ArrivalPlan``): every policy serves the
same requests at the same times, and the run drains after the last phase,
so every policy completes the same set.

Figures per seed: mean and 90th-percentile request latency, and tokens per
engine second (idle time excluded; every policy produces the same tokens,
so this is how fast its steps were). The oracle picks K per step from the
true cost at the live state (``oracles.StateOracle``), "the oracle by
state". All figures are modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specdeploy.runtime.sim.compare import Comparison, figures
from specdeploy.runtime.sim.engine import SimResult
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.scenario_common import (
    Figures,
    Progress,
    ScenarioOutput,
    mean_bs,
    over_seeds,
)
from specdeploy.runtime.sim.workload import OpenLoop, PiecewiseRate

PHASE_S = 10.0
PHASE_LOAD = (0.08, 0.77, 0.19, 0.96, 0.04, 0.58)
"""Arrival rate per phase as a share of vanilla's capacity at the largest batch."""


def phase_rates(preset: Preset) -> tuple[float, ...]:
    """Requests/s per phase: ``PHASE_LOAD`` times vanilla's request capacity.

    Capacity = 1 / vanilla's step time at the largest batch times that batch,
    over the mean output length of the open loop's requests.
    """
    workload = OpenLoop(PiecewiseRate(((0.0, 0.0),)))
    bs = preset.max_batch_size
    context = workload.prompt.mean + workload.output.mean / 2.0
    step = preset.cost.decode_itl(bs, 0, context=context, speculative=False)
    capacity = bs / step / workload.output.mean
    return tuple(round(capacity * share, 2) for share in PHASE_LOAD)


def phased_workload(rates: Sequence[float], phase_s: float = PHASE_S) -> OpenLoop:
    points = tuple((i * phase_s, r) for i, r in enumerate(rates))
    return OpenLoop(PiecewiseRate(points), horizon_s=phase_s * len(rates))


def _latency_figures(r: SimResult) -> Figures:
    assert r.requests is not None
    latency = r.requests.latency
    return {
        "mean_latency_s": r.mean_latency_s,
        "p90_latency_s": float(np.percentile(latency, 90)) if latency.size else 0.0,
        "completed": r.completed_requests,
        "makespan_s": r.end_time,
    }


def compare_phased(
    cmp: Comparison,
    policies: Sequence[str],
    *,
    rates: Sequence[float] | None = None,
    phase_s: float = PHASE_S,
    progress: Progress = None,
) -> ScenarioOutput:
    """Every policy serves the same pre-drawn arrivals on each seed, drained."""
    preset = cmp.preset
    rates = tuple(rates) if rates is not None else phase_rates(preset)
    workload = phased_workload(rates, phase_s)

    def run_one(name: str, seed: int) -> Figures:
        r = cmp.drain(name, workload, seed=seed)
        return figures(r, **_latency_figures(r))

    rows = over_seeds(
        cmp, policies, run_one, batch_size=mean_bs, label="phased: ", progress=progress
    )
    info: dict[str, Any] = {
        "name": "phased",
        "rates_rps": list(rates),
        "phase_s": phase_s,
        "drained": True,
    }
    return rows, info
