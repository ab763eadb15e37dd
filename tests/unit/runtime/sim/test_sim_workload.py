"""Workloads: length distributions, arrival rates and Poisson arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from specdeploy.runtime.sim.workload import (
    MT_BENCH_OUTPUT,
    MT_BENCH_PROMPT,
    SHAREGPT_OUTPUT,
    SHAREGPT_PROMPT,
    ClosedLoop,
    ConstantRate,
    Lengths,
    PiecewiseRate,
    RequestStream,
    SinusoidalRate,
    arrivals,
    fixed,
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
    wave = SinusoidalRate(mean=10.0, amplitude=15.0, period_s=60.0)
    assert wave(15.0) == pytest.approx(25.0)
    assert wave(45.0) == 0.0  # floored, never negative


def test_poisson_arrivals_average_the_rate() -> None:
    rng = np.random.default_rng(4)
    rate = ConstantRate(50.0)
    counts = [len(arrivals(rate, t, t + 0.1, rng)) for t in np.arange(0.0, 200.0, 0.1)]
    assert float(np.mean(counts)) == pytest.approx(5.0, rel=0.03)
    times = arrivals(rate, 3.0, 4.0, rng)
    assert list(times) == sorted(times) and all(3.0 <= t < 4.0 for t in times)
    assert arrivals(ConstantRate(0.0), 0.0, 10.0, rng) == ()
