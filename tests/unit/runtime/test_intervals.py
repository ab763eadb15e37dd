"""Intervals for few, autocorrelated measurements (``runtime/intervals.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdeploy.runtime.intervals import batch_means, mean_half_width, t_quantile


@pytest.mark.parametrize(("dof", "expected"), [(1, 12.706), (4, 2.776), (30, 2.042)])
def test_t_quantiles_at_95_percent_are_the_table_values(dof: int, expected: float) -> None:
    assert t_quantile(dof) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(("dof", "expected"), [(40, 2.021), (60, 2.000), (120, 1.980)])
def test_the_expansion_continues_the_table(dof: int, expected: float) -> None:
    assert t_quantile(dof) == pytest.approx(expected, rel=2e-3)


def test_other_levels_use_the_expansion_and_tend_to_the_normal_quantile() -> None:
    assert t_quantile(10, z=2.576) == pytest.approx(3.169, rel=0.01)  # 99%, 10 dof
    assert t_quantile(10**6, z=2.576) == pytest.approx(2.576, rel=1e-4)
    assert t_quantile(0) == math.inf


def test_batch_means_never_cross_a_repeat_and_keep_short_repeats() -> None:
    assert batch_means([[1.0] * 16 + [3.0] * 16], batch=8) == [1.0, 1.0, 3.0, 3.0]
    # a repeat shorter than two batches is halved; a short remainder joins its block
    assert batch_means([[1.0, 3.0, 5.0, 7.0], [2.0] * 19], batch=8) == [2.0, 6.0, 2.0, 2.0]


def _ar1(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    noise = rng.normal(size=n) * math.sqrt(1 - rho**2)
    out = np.empty(n)
    out[0] = rng.normal()
    for i in range(1, n):
        out[i] = rho * out[i - 1] + noise[i]
    return out


def test_batch_means_cover_the_mean_of_an_autocorrelated_series_where_steps_do_not() -> None:
    """AR(1) with rho 0.8 (the shipped raw file's worst lag-1 correlation): the
    interval from single steps taken as independent misses the true mean far more
    often than 5%; the batch-means interval stays near its nominal level."""
    rng = np.random.default_rng(7)
    trials, steps = 400, 64
    naive_miss = batch_miss = 0
    for _ in range(trials):
        series = 100.0 + _ar1(rng, steps, 0.8)
        mean = float(series.mean())
        naive_miss += abs(mean - 100.0) > mean_half_width(list(series))
        batch_miss += abs(mean - 100.0) > mean_half_width(batch_means([list(series)], 16))
    assert naive_miss / trials > 0.25
    assert batch_miss / trials < 0.12
