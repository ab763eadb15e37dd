"""The live table: re-derived from live acceptance, pushed past a margin only, frozen on trouble."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from specdeploy.operator.config import Config
from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan
from specdeploy.operator.telemetry.assess import PoolInputs, assess_pool, in_force
from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.operator.telemetry.window import FetchProblem, StepTimes, TelemetryReport
from specdeploy.runtime.ranges import schedule_problems, validate_vllm
from specdeploy.runtime.schedule import derive_schedule
from tests.unit.operator.telemetry.fakes import (
    H100,
    LATER,
    NOW,
    PROFILE_RATES,
    URL,
    body,
    condition,
    owned,
    pool,
    profile_spec,
    report,
    settle,
    step,
    window,
    without_hash,
    world,
)

LOW = (0.3, 0.2, 0.1, 0.1, 0.1)


def table(decision: Any) -> list[list[int]]:
    schedule: list[list[int]] = json.loads(owned(decision, "ConfigMap")["data"]["table.json"])[
        "schedule"
    ]
    return schedule


def mean_k(schedule: Sequence[Sequence[int]]) -> float:
    """K averaged over batch sizes 1..256 (the shape of a table in one number)."""
    ks = [next(k for lo, hi, k in schedule if lo <= bs <= hi) for bs in range(1, 257)]
    return sum(ks) / len(ks)


def test_a_traffic_shift_to_low_acceptance_moves_the_table_toward_lower_k_without_a_restart() -> (
    None
):
    deployment, before = settle(body())
    _, after = step(deployment, before, report(p=window(LOW, k=3)))
    assert mean_k(table(after)) < mean_k(table(before))
    assert validate_vllm(table(after)) == [tuple(r) for r in table(after)]
    assert pool(after)["profileSource"] == "live"
    assert pool(after)["live"]["source"] == "live"
    assert pool(after)["schedule"] == pool(after)["live"]["schedule"]
    # the pod template does not change: a table change restarts nothing
    assert without_hash(owned(after, "Deployment")) == without_hash(owned(before, "Deployment"))
    assert condition(after, "TablesCurrent")["reason"] == "AcceptanceDrift"
    assert {e.reason for e in after.events} >= {"LiveTable", "AcceptanceDrift"}


def test_acceptance_back_to_the_profiles_brings_a_table_like_the_profiles_back() -> None:
    deployment, before = settle(body())
    low_body, low = step(deployment, before, report(p=window(LOW, k=3)))
    _, back = step(low_body, low, report(p=window(PROFILE_RATES, k=5, sequences=200_000)))
    profile_table = derive_schedule(profile_spec(body()))
    assert abs(mean_k(table(back)) - mean_k(profile_table)) < 0.5
    assert mean_k(table(back)) > mean_k(table(low))


def test_a_quiet_interval_writes_nothing() -> None:
    deployment, before = settle(body())
    low_body, low = step(deployment, before, report(p=window(LOW, k=3)))
    # the next interval: the same traffic, counts a little different
    again = step(
        low_body, low, report(p=window((0.305, 0.2, 0.1, 0.1, 0.1), k=3, sequences=21_000))
    )
    obs = world(low_body, low)
    assert plan(low_body, again[1], obs, now=LATER) == []


def test_live_traffic_that_agrees_with_the_profile_keeps_the_profiles_table_and_says_so() -> None:
    deployment, before = settle(body())
    _, after = step(deployment, before, report(p=window(PROFILE_RATES, k=5, sequences=100_000)))
    assert table(after) == table(before)
    assert pool(after)["profileSource"] == "modelled"
    assert pool(after)["live"]["source"] == "profile"
    assert condition(after, "TablesCurrent")["reason"] == "ProfileTable"
    assert condition(after, "TelemetryHealthy")["status"] == "True"


def test_a_trickle_of_traffic_is_not_confident_and_moves_no_table() -> None:
    deployment, before = settle(body())
    _, after = step(deployment, before, report(p=window(LOW, k=3, sequences=150)))
    assert table(after) == table(before)
    assert pool(after)["live"]["confident"] is False


def inputs(rates: tuple[float, ...], previous: Any = None, **kw: Any) -> PoolInputs:
    spec = profile_spec(body())
    base = tuple(derive_schedule(spec))
    return PoolInputs(
        profile=spec,
        digest="d1",
        base=base,
        allowed_k=(0, 1, 2, 3, 4, 5),
        previous=previous,
        window=window(rates, k=3, **kw),
        now=NOW,
    )


def test_a_gain_below_the_margin_is_not_pushed() -> None:
    strict = TelemetrySettings(push_margin=10.0)  # nothing predicts +1000%
    live = assess_pool(inputs(LOW), strict).view
    assert live is not None and live.source.value == "profile" and live.schedule is None
    pushed = assess_pool(inputs(LOW), TelemetrySettings()).view
    assert pushed is not None and pushed.source.value == "live"


def test_the_live_table_uses_only_the_k_the_pods_run() -> None:
    base = inputs(LOW)
    only = PoolInputs(**{**base.__dict__, "allowed_k": (0, 3, 5)})
    live = assess_pool(only, TelemetrySettings()).view
    assert live is not None and live.schedule_ranges is not None
    assert {k for _, _, k in live.schedule_ranges} <= {0, 3, 5}
    assert not list(schedule_problems(live.schedule_ranges, max_k=5))


def test_a_view_of_other_profile_content_is_void() -> None:
    live = assess_pool(inputs(LOW), TelemetrySettings()).view
    assert live is not None
    stale = PoolInputs(**{**inputs(LOW).__dict__, "previous": live, "digest": "d2", "window": None})
    assert assess_pool(stale, TelemetrySettings()).view is None
    assert in_force(stale) == stale.base


def test_prometheus_down_freezes_the_table_and_says_why_and_recovery_says_healthy() -> None:
    deployment, before = settle(body())
    low_body, low = step(deployment, before, report(p=window(LOW, k=3)))
    down = TelemetryReport(
        URL, 60.0, problem=FetchProblem.UNREACHABLE, detail="ClientConnectorError"
    )
    down_body, frozen = step(low_body, low, down)
    assert table(frozen) == table(low)
    assert pool(frozen)["live"] == pool(low)["live"]
    healthy = condition(frozen, "TelemetryHealthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "PrometheusUnreachable")
    assert condition(frozen, "TablesCurrent")["reason"] == "TablesFrozen"
    assert any(e.reason == "PrometheusUnreachable" and e.type == "Warning" for e in frozen.events)
    # a reconcile between intervals (no report) keeps the verdict: no flapping, no write
    between = decide(down_body, world(down_body, frozen), now=LATER, config=Config())
    assert condition(between, "TelemetryHealthy")["reason"] == "PrometheusUnreachable"
    assert plan(down_body, between, world(down_body, frozen), now=LATER) == []
    _, recovered = step(down_body, frozen, report(p=window(LOW, k=3)))
    assert condition(recovered, "TelemetryHealthy")["status"] == "True"
    assert any(e.reason == "Healthy" for e in recovered.events)


def test_a_pool_without_series_or_with_stale_ones_is_frozen_with_the_reason() -> None:
    deployment, before = settle(body())
    pending_body, pending = step(deployment, before, TelemetryReport(URL, 60.0, {}))
    assert condition(pending, "TelemetryHealthy")["reason"] == "SeriesPending"  # one grace
    _, missing = step(pending_body, pending, TelemetryReport(URL, 60.0, {}))
    assert condition(missing, "TelemetryHealthy")["reason"] == "SeriesMissing"
    assert table(missing) == table(before)
    _, stale = step(deployment, before, report(p=window(LOW, k=3, age=3600.0)))
    assert condition(stale, "TelemetryHealthy")["reason"] == "SeriesStale"
    assert table(stale) == table(before)
    assert "live" not in pool(stale)


def test_without_any_prometheus_telemetry_is_unknown_and_with_the_env_default_it_reads() -> None:
    plain = body(telemetry={"interval": "60s"})
    _, decision = settle(plain)
    healthy = condition(decision, "TelemetryHealthy")
    assert (healthy["status"], healthy["reason"]) == ("Unknown", "NoPrometheus")
    assert condition(decision, "TablesCurrent")["reason"] == "NoTelemetry"
    _, with_env = settle(plain, config=Config(prometheus_url=URL))
    assert condition(with_env, "TelemetryHealthy")["reason"] == "NoInterval"


def test_no_series_before_any_verdict_is_pending_then_missing() -> None:
    """A roll-out's first interval may come before Prometheus scraped the new pods."""
    from specdeploy.operator.telemetry.health import telemetry_health

    first = telemetry_health(
        url=URL,
        report=TelemetryReport(URL, 60.0, {}),
        expected=["p"],
        interval_seconds=60.0,
        stale_intervals=2.0,
    )
    assert (first.condition.status.value, first.condition.reason) == ("Unknown", "SeriesPending")
    carried = [first.condition.model_dump(mode="json", by_alias=True)]
    second = telemetry_health(
        url=URL,
        report=TelemetryReport(URL, 60.0, {}),
        expected=["p"],
        interval_seconds=60.0,
        stale_intervals=2.0,
        old_conditions=carried,
    )
    assert (second.condition.status.value, second.condition.reason) == ("False", "SeriesMissing")
    healthy = [{"type": "TelemetryHealthy", "status": "True", "reason": "Healthy", "message": ""}]
    third = telemetry_health(
        url=URL,
        report=TelemetryReport(URL, 60.0, {}),
        expected=["p"],
        interval_seconds=60.0,
        stale_intervals=2.0,
        old_conditions=healthy,
    )
    assert (third.condition.status.value, third.condition.reason) == ("False", "SeriesMissing")


def test_only_speculating_pools_with_a_ready_replica_under_a_profiled_policy_are_expected() -> None:
    from specdeploy.operator.api import Policy
    from specdeploy.operator.telemetry.health import expected_pools

    previous = {
        "NVIDIA-H100-80GB-HBM3": {"speculating": True, "readyReplicas": 2},
        "NVIDIA-A100-SXM4-80GB": {"speculating": True, "readyReplicas": 0},
        "NVIDIA-L4": {"speculating": False, "readyReplicas": 3},
    }
    assert expected_pools(Policy.ADAPTIVE, previous) == ["NVIDIA-H100-80GB-HBM3"]
    assert expected_pools(Policy.TABLE, previous) == ["NVIDIA-H100-80GB-HBM3"]
    assert expected_pools(Policy.FIXED, previous) == []
    assert expected_pools(Policy.OFF, previous) == []


def test_a_plain_pools_canary_series_are_used_when_fresh_and_never_waited_for() -> None:
    """The live floor's canary may stay Pending (no free GPU): its absence is no fault."""
    from specdeploy.operator.api import Policy
    from specdeploy.operator.telemetry.health import canary_pools, telemetry_health

    previous = {
        "NVIDIA-H100-80GB-HBM3": {"speculating": False, "floor": {"state": "plain"}},
        "NVIDIA-L4": {"speculating": True, "readyReplicas": 1, "floor": {"state": "speculating"}},
    }
    assert canary_pools(Policy.ADAPTIVE, previous) == ["NVIDIA-H100-80GB-HBM3"]
    assert canary_pools(Policy.FIXED, previous) == []
    fresh, stale = window(age=5.0), window(age=500.0)
    kwargs: dict[str, Any] = {"url": URL, "interval_seconds": 60.0, "stale_intervals": 2.0}
    alone = telemetry_health(
        report=TelemetryReport(URL, 60.0, {H100: fresh}), expected=[], optional=[H100], **kwargs
    )
    assert alone.condition.reason == "NothingToObserve" and alone.windows == {H100: fresh}
    old = telemetry_health(
        report=TelemetryReport(URL, 60.0, {H100: stale}), expected=[], optional=[H100], **kwargs
    )
    assert old.windows == {}
    beside = telemetry_health(
        report=TelemetryReport(URL, 60.0, {"NVIDIA-L4": fresh}),
        expected=["NVIDIA-L4"],
        optional=[H100],
        **kwargs,
    )
    assert beside.condition.reason == "Healthy" and set(beside.windows) == {"NVIDIA-L4"}


def test_r_of_an_eagle_pool_at_k0_is_its_own_plain_step_over_its_k0_step() -> None:
    """The example profile has no plain baseline, so R could not be priced; the pods
    timed their K=0 step (40 ms) and the head's pass in it (2 ms): R = 38 / 40, with
    no more than the plugin's remainder for an interval."""
    base = window((0.02, 0.01, 0.0, 0.0, 0.0), k=0, steps=5000.0)
    k0 = replace(
        base,
        step_times={("3-4", 0): StepTimes(0.040 * 5000, 5000.0)},
        k0_passes={"3-4": StepTimes(0.002 * 5000, 5000.0)},
    )
    spec = profile_spec(body())
    assert spec.fingerprint.method == "eagle3" and not spec.baseline
    found = assess_pool(replace(inputs(LOW), window=k0), TelemetrySettings()).ratio
    assert found is not None and found.live_share == 1.0
    assert found.ratio == pytest.approx(38.0 / 40.0, abs=1e-4)
    assert found.high < 0.96
    untimed = replace(k0, k0_passes={})  # a pod that does not time its pass (older add-on)
    assert assess_pool(replace(inputs(LOW), window=untimed), TelemetrySettings()).ratio is None
