"""The plain reference's A/B: a Student's t interval over windows that covers what it should."""

from __future__ import annotations

import math
import random

import pytest

from specdeploy.operator.pool.plain_reference import ab_ratio, undecided, window_ratio
from specdeploy.operator.telemetry.window import PoolWindow, StepTimes
from specdeploy.runtime.floor import LiveRatio

pytestmark = pytest.mark.unit


def test_the_a_b_interval_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    truth, covered, draws = 0.983, 0, 2000
    for _ in range(draws):
        ratios = [truth * math.exp(rng.gauss(0.0, 0.02)) for _ in range(8)]
        ab = ab_ratio(ratios, (256,), min_windows=5)
        assert ab is not None and ab.low < ab.ratio < ab.high
        covered += ab.low <= truth <= ab.high
    assert 0.93 <= covered / draws <= 0.97


def test_too_few_windows_give_no_a_b_and_its_interval_narrows_with_more() -> None:
    assert ab_ratio([0.98, 0.99, 0.97, 0.985], (256,), min_windows=5) is None
    assert ab_ratio([0.98], (256,), min_windows=1) is None, "one window has no spread"
    few = ab_ratio([0.97, 0.99] * 3, (256,), min_windows=5)
    many = ab_ratio([0.97, 0.99] * 30, (256,), min_windows=5)
    assert few is not None and many is not None
    assert many.high - many.low < 0.3 * (few.high - few.low)


def test_a_window_counts_only_with_enough_requests_on_both_sides() -> None:
    both = PoolWindow(60.0, tpot=StepTimes(1.0, 50.0), reference_tpot=StepTimes(0.98, 50.0))
    assert window_ratio(both, 20.0) == pytest.approx(0.98)
    thin = PoolWindow(60.0, tpot=StepTimes(1.0, 50.0), reference_tpot=StepTimes(0.1, 10.0))
    assert window_ratio(thin, 20.0) is None
    assert window_ratio(PoolWindow(60.0, tpot=StepTimes(1.0, 50.0)), 20.0) is None
    assert window_ratio(None, 20.0) is None


def test_undecided_means_neither_a_loss_nor_a_win_beyond_the_margin() -> None:
    assert undecided(LiveRatio(1.04, 0.97, 1.11, (256,)), 0.02)
    assert not undecided(LiveRatio(0.9, 0.85, 0.95, (16,)), 0.02)
    assert not undecided(LiveRatio(1.25, 1.18, 1.32, (16,)), 0.02)
