"""A pool's replica count from its table's capacity and telemetry's demand, per autoscaling mode."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from specdeploy.operator.api import (
    AutoscalingMode,
    AutoscalingSpec,
    PoolScaling,
    ScaleLimit,
    SpeculativeDeploymentSpec,
)
from specdeploy.operator.builders.scaler import WANTED_REPLICAS_METRIC, wanted_replicas_query
from specdeploy.operator.decision.validation import validate
from specdeploy.operator.discovery import GpuNodes
from specdeploy.operator.pool.autoscale import ScaleState
from specdeploy.operator.pool.pools import Pool
from specdeploy.operator.pool.scaling import capacity_of, demand_of, pool_scale
from specdeploy.operator.reactor.metrics import pool_scaling
from specdeploy.operator.telemetry.window import PoolWindow
from specdeploy.runtime.capacity import Capacity
from specdeploy.runtime.live import live_goodput_grid
from specdeploy.runtime.schedule import derive_schedule
from tests.unit.operator.telemetry.fakes import H100, PROFILE_RATES, body, profile_spec, window

pytestmark = pytest.mark.unit

PROFILE = profile_spec(body())
SCHEDULE = tuple((int(a), int(b), int(c)) for a, b, c in derive_schedule(PROFILE))
TARGET_MS = 10.0
_CAPACITY = capacity_of(PROFILE, SCHEDULE, None, tpot_target_s=TARGET_MS / 1000)
assert _CAPACITY is not None
CAPACITY: Capacity = _CAPACITY
PER_REPLICA = CAPACITY.tokens_per_second * 0.8  # at the default 20% headroom


def pool(low: int = 1, high: int = 8, gpus: int = 64) -> Pool:
    return Pool(H100, 1, low, high, GpuNodes(H100, gpus // 8, 8, gpus))


def loaded(tokens_per_s: float, waiting: float = 0.0, rps: float = 10.0) -> PoolWindow:
    return dataclasses.replace(
        window(),
        generation_tokens_per_second=tokens_per_s,
        waiting_requests=waiting,
        requests_per_second=rps,
    )


def deployment(replicas: int) -> dict[str, Any]:
    return {"spec": {"replicas": replicas}}


def scale(
    mode: AutoscalingMode,
    *,
    at: PoolWindow | None,
    current: int | None = 2,
    state: ScaleState | None = None,
    now: float = 1000.0,
    shape: Pool | None = None,
    previous: PoolScaling | None = None,
    **spec: Any,
) -> Any:
    auto = AutoscalingSpec(mode=mode, tpot_target_ms=TARGET_MS, **spec)
    return pool_scale(
        auto,
        shape or pool(),
        profile=PROFILE,
        schedule=SCHEDULE,
        goodput=None,
        window=at,
        deployment=None if current is None else deployment(current),
        previous=previous,
        state=state,
        now=now,
    )


def test_mode_none_runs_the_minimum_and_says_nothing() -> None:
    result = scale(AutoscalingMode.NONE, at=loaded(1e6), shape=pool(low=3))

    assert (result.replicas, result.status, result.state) == (3, None, None)


def test_operator_mode_scales_up_at_once_to_demand_over_capacity_less_headroom() -> None:
    result = scale(AutoscalingMode.OPERATOR, at=loaded(PER_REPLICA * 4.5))

    assert result.replicas == 5  # ceil(4.5)
    assert result.status.wanted_replicas == 5
    assert result.status.limited_by is ScaleLimit.DEMAND
    assert result.status.capacity_batch_size == CAPACITY.batch_size
    assert result.state is not None and result.state.replicas == 5


def test_the_queue_counts_as_demand_drained_within_the_window() -> None:
    # No tokens served yet, 40 requests of 100 tokens waiting, drained in 4 s: 1000 tokens/s.
    waiting = dataclasses.replace(
        loaded(0.0, waiting=40, rps=1.0), generation_tokens_per_second=100.0
    )
    demand = demand_of(waiting)

    assert demand is not None
    assert demand.tokens_per_second(4.0) == pytest.approx(100.0 + 40 * 100.0 / 4.0)


def test_a_restart_waits_a_whole_down_window_before_shrinking() -> None:
    # No state in memory (the operator restarted) and little demand: the count holds ...
    first = scale(AutoscalingMode.OPERATOR, at=loaded(1.0), current=4, now=0.0)
    assert first.replicas == 4 and first.status.wanted_replicas == 1
    # ... until the down window (300 s by default) has passed with low recommendations.
    held = scale(AutoscalingMode.OPERATOR, at=loaded(1.0), current=4, state=first.state, now=200)
    assert held.replicas == 4
    down = scale(AutoscalingMode.OPERATOR, at=loaded(1.0), current=4, state=held.state, now=301)
    assert down.replicas == 1


def test_without_a_window_operator_mode_keeps_the_deployments_count_within_bounds() -> None:
    assert scale(AutoscalingMode.OPERATOR, at=None, current=6).replicas == 6
    assert scale(AutoscalingMode.OPERATOR, at=None, current=20).replicas == 8  # max
    assert scale(AutoscalingMode.OPERATOR, at=None, current=None).replicas == 1  # min
    status = scale(AutoscalingMode.OPERATOR, at=None).status
    assert status.limited_by is ScaleLimit.NO_TELEMETRY and status.wanted_replicas is None


def test_a_users_kubectl_scale_is_where_the_next_decision_starts() -> None:
    before = ScaleState(5, recent=((0.0, 5),))
    result = scale(
        AutoscalingMode.OPERATOR, at=loaded(PER_REPLICA * 2.5), current=2, state=before, now=10
    )

    assert result.replicas == 3  # from 2 up to the demand's 3, not from the remembered 5


def test_replicas_never_exceed_max_nor_the_gpus_of_the_type() -> None:
    capped = scale(AutoscalingMode.OPERATOR, at=loaded(PER_REPLICA * 50))
    assert (capped.replicas, capped.status.limited_by) == (8, ScaleLimit.MAX)
    few_gpus = scale(AutoscalingMode.OPERATOR, at=loaded(PER_REPLICA * 50), shape=pool(gpus=3))
    assert (few_gpus.replicas, few_gpus.status.limited_by) == (3, ScaleLimit.GPUS)


def test_an_unattainable_target_holds_the_count() -> None:
    auto = AutoscalingSpec(mode=AutoscalingMode.OPERATOR, tpot_target_ms=0.01)
    result = pool_scale(
        auto,
        pool(),
        profile=PROFILE,
        schedule=SCHEDULE,
        goodput=None,
        window=loaded(PER_REPLICA * 6),
        deployment=deployment(2),
        previous=None,
        state=None,
        now=0.0,
    )

    assert result.replicas == 2
    assert result.status is not None
    assert result.status.limited_by is ScaleLimit.NO_CAPACITY
    assert result.status.capacity_tokens_per_second is None


@pytest.mark.parametrize("mode", [AutoscalingMode.HPA, AutoscalingMode.KEDA])
def test_hpa_and_keda_leave_replicas_to_the_scaler_and_report_the_wanted_count(
    mode: AutoscalingMode,
) -> None:
    result = scale(mode, at=loaded(PER_REPLICA * 3.2), current=1)

    assert result.replicas is None  # left out of what the operator applies
    assert result.status.wanted_replicas == 4
    assert result.state is None


def test_live_acceptance_changes_the_capacity() -> None:
    collapsed = tuple(r * 0.1 for r in PROFILE_RATES)
    grid = live_goodput_grid(PROFILE, collapsed)
    worse = capacity_of(PROFILE, SCHEDULE, grid, tpot_target_s=TARGET_MS / 1000)

    assert worse is not None and worse.tokens_per_second < CAPACITY.tokens_per_second


def test_the_wanted_count_is_served_per_pool_deployment_for_the_scalers() -> None:
    status = scale(AutoscalingMode.HPA, at=loaded(PER_REPLICA * 3.2)).status
    obj = {
        "metadata": {"namespace": "inference", "name": "llama"},
        "status": {
            "pools": [
                {"gpuType": H100, "autoscaling": status.model_dump(mode="json", by_alias=True)},
                {"gpuType": "other"},  # no autoscaler view: no series
            ]
        },
    }
    series = pool_scaling([obj])

    ((labels, (wanted, capacity)),) = series.items()
    assert labels[:2] == ("inference", "llama-h100-80gb-hbm3")
    assert wanted == 4.0 and capacity == pytest.approx(CAPACITY.tokens_per_second, rel=0.01)
    assert wanted_replicas_query("inference", labels[1]).startswith(f"max({WANTED_REPLICAS_METRIC}")


def test_validation_wants_a_latency_target_and_an_hpa_minimum_of_one() -> None:
    spec = body()["spec"]
    no_target = validate({**spec, "autoscaling": {"mode": "operator"}})
    assert [p.reason for p in no_target.problems] == ["AutoscalingTargetMissing"]
    pools = [{"gpuType": H100, "replicas": {"min": 0, "max": 2}}]
    zero = validate({**spec, "pools": pools, "autoscaling": {"mode": "hpa", "tpotTargetMs": 20}})
    assert [p.reason for p in zero.problems] == ["AutoscalingHpaBelowOne"]
    fine = {**spec, "autoscaling": {"mode": "keda", "tpotTargetMs": 20}}
    assert isinstance(validate(fine).spec, SpeculativeDeploymentSpec)
