"""Workloads: length distributions, arrival rates and pre-drawn Poisson arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from specdeploy.runtime.sim.workload import (
    MT_BENCH_OUTPUT,
    MT_BENCH_PROMPT,
    SHAREGPT_OUTPUT,
    SHAREGPT_PROMPT,
    ArrivalPlan,
    ClosedLoop,
    ConstantRate,
    Lengths,
    OpenLoop,
    PiecewiseRate,
    RequestStream,
    Rollout,
    fixed,
    is_finite,
)


def test_lengths_are_clipped_lognormal_with_the_documented_mean() -> None:
    rng = np.random.default_rng(0)
    for dist in (SHAREGPT_PROMPT, SHAREGPT_OUTPUT, MT_BENCH_PROMPT, MT_BENCH_OUTPUT):
        x = dist.sample(rng, 50_000)
        assert x.min() >= dist.lo and x.max() <= dist.hi
        assert float(np.median(x)) == pytest.approx(dist.median, rel=0.05)
        assert float(x.mean()) == pytest.approx(dist.mean, rel=0.1)
    # Chat shapes: MT-Bench asks short and answers long; ShareGPT has a long prompt tail.
    assert MT_BENCH_OUTPUT.mean > 3 * MT_BENCH_PROMPT.mean
    assert SHAREGPT_PROMPT.sample(rng, 50_000).max() > 2000


def test_fixed_lengths_and_invalid_distributions() -> None:
    assert set(fixed(37).sample(np.random.default_rng(1), 100).tolist()) == {37}
    with pytest.raises(ValueError):
        Lengths(median=0.0, sigma=1.0)
    with pytest.raises(ValueError):
        Lengths(median=10.0, sigma=1.0, lo=5, hi=4)
    with pytest.raises(ValueError):
        ClosedLoop(0)


def test_request_stream_is_deterministic_across_block_boundaries() -> None:
    a = RequestStream(SHAREGPT_PROMPT, SHAREGPT_OUTPUT, np.random.default_rng(9))
    b = RequestStream(SHAREGPT_PROMPT, SHAREGPT_OUTPUT, np.random.default_rng(9))
    first = np.concatenate([a.take(3000)[0], a.take(3000)[0], a.take(5000)[0]])
    second = b.take(11_000)[0]
    assert np.array_equal(first, second)


def test_rate_shapes() -> None:
    assert ConstantRate(3.0)(123.0) == 3.0
    steps = PiecewiseRate(((0.0, 1.0), (10.0, 5.0), (20.0, 2.0)))
    assert [steps(t) for t in (0.0, 9.9, 10.0, 19.0, 25.0)] == [1.0, 1.0, 5.0, 5.0, 2.0]
    with pytest.raises(ValueError):
        PiecewiseRate(((5.0, 1.0), (1.0, 2.0)))


def test_poisson_arrivals_average_the_rate_of_each_phase() -> None:
    rate = PiecewiseRate(((0.0, 50.0), (100.0, 5.0)))
    plan = ArrivalPlan(rate, np.random.default_rng(4))
    times = plan.pop_until(200.0)
    assert times == sorted(times)
    first, second = sum(t < 100.0 for t in times), sum(t >= 100.0 for t in times)
    assert first == pytest.approx(5000, rel=0.05)
    assert second == pytest.approx(500, rel=0.15)
    assert ArrivalPlan(ConstantRate(0.0), np.random.default_rng(1)).pop_until(50.0) == []


def test_arrival_times_do_not_depend_on_how_often_the_engine_asks() -> None:
    # One caller asks after every short step, another after long ones: same arrivals.
    rate = ConstantRate(30.0)
    fine = ArrivalPlan(rate, np.random.default_rng(7))
    coarse = ArrivalPlan(rate, np.random.default_rng(7))
    asked_often = [t for i in range(1, 2001) for t in fine.pop_until(i * 0.013)]
    asked_rarely = [t for i in range(1, 27) for t in coarse.pop_until(i * 1.0)]
    asked_rarely = [t for t in asked_rarely if t <= 2000 * 0.013]
    assert asked_often == asked_rarely
    assert len(asked_often) > 600


def test_arrival_plan_stops_at_the_horizon_and_says_when_it_is_exhausted() -> None:
    plan = ArrivalPlan(ConstantRate(20.0), np.random.default_rng(3), horizon_s=2.5)
    times = plan.pop_until(100.0)
    assert times and max(times) < 2.5
    assert plan.next_time() is None
    fresh = ArrivalPlan(ConstantRate(20.0), np.random.default_rng(3), horizon_s=2.5)
    first = fresh.next_time()
    assert first == times[0]
    assert fresh.pop_until(first) == [first]  # next_time does not consume


def test_finite_workloads_are_rollouts_and_open_loops_with_a_horizon() -> None:
    assert is_finite(Rollout(8, fixed(4), fixed(4)))
    assert is_finite(OpenLoop(ConstantRate(1.0), horizon_s=10.0))
    assert not is_finite(OpenLoop(ConstantRate(1.0)))
    assert not is_finite(ClosedLoop(4))
    with pytest.raises(ValueError):
        Rollout(0, fixed(4), fixed(4))
    with pytest.raises(ValueError):
        OpenLoop(ConstantRate(1.0), horizon_s=0.0)
