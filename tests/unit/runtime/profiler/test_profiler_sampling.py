"""Repeat-until-stable: the confidence interval and the stopping rule of one cell."""

from __future__ import annotations

import math

import pytest

from specdeploy.runtime.profiler.backend import CellSample
from specdeploy.runtime.profiler.sampling import CellStats, Sampling


def _sample(times: list[float], k: int = 2, drafted=(100, 80), accepted=(80, 56)) -> CellSample:  # type: ignore[no-untyped-def]
    return CellSample(8, k, times, drafted, accepted)


def test_a_cell_with_one_step_has_no_interval_and_is_never_stable() -> None:
    stats = CellStats(8, 2)
    stats.add(_sample([0.01]))
    assert math.isinf(stats.half_width())
    assert not stats.stable(Sampling(min_repeats=1))


def test_identical_steps_are_stable_after_min_repeats() -> None:
    stats = CellStats(8, 2)
    rule = Sampling(min_repeats=2)
    stats.add(_sample([0.01] * 32))
    assert stats.half_width() == 0.0
    assert not stats.stable(rule)
    stats.add(_sample([0.01] * 32))
    assert stats.stable(rule)


def test_noisy_steps_need_more_repeats_until_max() -> None:
    noisy = [0.010, 0.014] * 8  # 17% spread around 12 ms: far from a 1% interval
    rule = Sampling(min_repeats=1, max_repeats=3, rel_ci=0.01)
    stats = CellStats(8, 2)
    stats.add(_sample(noisy))
    assert stats.relative_half_width() > 0.01
    assert not stats.stable(rule)
    stats.add(_sample(noisy))
    stats.add(_sample(noisy))
    assert stats.stable(rule)  # max_repeats reached
    assert stats.samples == 48 and stats.repeats == 3


def test_drift_between_repeats_widens_the_interval() -> None:
    stats = CellStats(8, 0)
    stats.add(_sample([0.010] * 64, k=0, drafted=(), accepted=()))
    stats.add(_sample([0.012] * 64, k=0, drafted=(), accepted=()))
    # Each repeat alone is flat; their means differ by 20%: not stable.
    assert stats.relative_half_width() > 0.05


def test_acceptance_length_from_conditional_counts() -> None:
    stats = CellStats(8, 2)
    stats.add(_sample([0.01] * 4, drafted=(100, 80), accepted=(80, 56)))
    stats.add(_sample([0.01] * 4, drafted=(100, 60), accepted=(60, 30)))
    assert stats.drafted == [200, 140] and stats.accepted == [140, 86]
    # AL = 1 + accepted tokens per sequence-step = 1 + (140 + 86) / 200.
    assert stats.acceptance_length() == pytest.approx(2.13)
    assert CellStats(8, 0).acceptance_length() is None


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (CellSample(4, 2, [0.01]), "added to cell"),
        (CellSample(8, 2, []), "must be > 0"),
        (CellSample(8, 2, [0.01, -1.0]), "must be > 0"),
        (CellSample(8, 2, [0.01], (10, 5), (11, 5)), "accepted exceeds drafted"),
    ],
    ids=["wrong cell", "no steps", "negative step", "more accepted than drafted"],
)
def test_bad_samples_are_refused(sample: CellSample, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CellStats(8, 2).add(sample)


@pytest.mark.parametrize(
    "kwargs",
    [{"steps": 1}, {"min_repeats": 0}, {"min_repeats": 3, "max_repeats": 2}, {"rel_ci": 0}],
)
def test_sampling_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Sampling(**kwargs)  # type: ignore[arg-type]


def test_the_next_repeat_asks_for_the_steps_the_spread_says_are_missing() -> None:
    rule = Sampling(steps=16, min_repeats=1, rel_ci=0.01, max_steps_factor=8)
    stats = CellStats(8, 2)
    assert rule.steps_for(stats) == 16  # nothing seen yet: the base
    # 4% spread: ~62 independent steps for a 1% interval with z; with t quantiles over
    # 8-step batch means, 11 batches (88 steps)
    stats.add(_sample([0.0096, 0.0104] * 8))
    wanted = stats.steps_to_reach(0.01)
    assert wanted == 88 - 16
    assert rule.steps_for(stats) == wanted
    assert rule.steps_for(stats, rel_ci=0.001) == 16 * 8  # capped
    flat = CellStats(8, 2)
    flat.add(_sample([0.01] * 16))
    assert rule.steps_for(flat) == 16  # never fewer than the base
