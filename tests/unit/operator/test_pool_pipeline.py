"""One pool's decision, as its stages hand it on: one live cost model per pool per reconcile."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specdeploy.operator.api import PoolLive, PoolScaling
from specdeploy.operator.telemetry.estimate import cell_ratios, itl_scale
from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.runtime.capacity import replica_capacity
from specdeploy.runtime.live import live_goodput_grid
from specdeploy.runtime.schedule import cost_model, derive_schedule, grid_rows
from tests.unit.operator.telemetry.fakes import (
    body,
    pool,
    profile_spec,
    report,
    settle,
    step,
    window,
)

pytestmark = pytest.mark.unit

TARGET_S = 0.010


def _capacity(grid: np.ndarray, schedule: tuple[tuple[int, int, int], ...]) -> float:
    found = replica_capacity(grid, schedule, tpot_target_s=TARGET_S)
    assert found is not None
    return float(f"{found.tokens_per_second:.3g}")  # as status rounds it


def test_scaling_prices_capacity_with_the_live_tables_per_bucket_cost_model() -> None:
    """Small batches run as the profile says, large ones at twice its step time: the live
    table prices each bucket by its own scale, and so must the capacity the pool is scaled
    by (a flat pooled ratio, as scaling once re-derived, prices both wrong)."""
    deployment = body(autoscaling={"mode": "operator", "tpotTargetMs": 10})
    deployment["spec"]["pools"][0]["replicas"] = {"min": 1, "max": 8}
    deployment, decision = settle(deployment)
    small = window(bucket="3-4", bs=3.5, cost_factor=1.0)
    large = window(bucket="33-64", bs=48.5, cost_factor=2.0)
    mixed = dataclasses.replace(
        small,
        step_times={**small.step_times, **large.step_times},
        generation_tokens_per_second=20_000.0,
        waiting_requests=0.0,
    )

    _, after = step(deployment, decision, report(mixed))

    spec = profile_spec(deployment)
    rows = grid_rows(spec)
    live = PoolLive.model_validate(pool(after)["live"])
    scaling = PoolScaling.model_validate(pool(after)["autoscaling"])
    schedule = tuple(
        (int(a), int(b), int(c)) for a, b, c in (live.schedule_ranges or derive_schedule(spec))
    )
    ratios = cell_ratios(mixed.step_times, cost_model(spec), max_batch_size=rows - 1)
    per_bucket = itl_scale(ratios, rows, TelemetrySettings())
    assert per_bucket[4] < per_bucket[48]  # the window does say two things
    live_grid = live_goodput_grid(spec, live.per_position, per_bucket)
    assert live.cost_ratio is not None
    flat_grid = live_goodput_grid(spec, live.per_position, np.full(rows, live.cost_ratio))
    assert _capacity(flat_grid, schedule) != _capacity(live_grid, schedule)  # it tells them apart
    assert scaling.capacity_tokens_per_second == _capacity(live_grid, schedule)
