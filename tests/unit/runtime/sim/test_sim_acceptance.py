"""Acceptance profiles and sampling: AL in expectation, common random numbers, drift, bursts."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.sim.acceptance import (
    EAGLE3_MT_BENCH,
    EAGLE_MT_BENCH,
    NGRAM_CHAT,
    Bursty,
    Drifting,
    Profile,
    count_accepted,
    survival,
)


def test_count_accepted_is_the_largest_n_with_survival_above_u() -> None:
    surv = survival([0.5, 0.5, 0.5])  # 0.5, 0.25, 0.125
    u = np.array([0.9, 0.5, 0.3, 0.2, 0.1, 0.0])
    assert count_accepted(surv, u, 3).tolist() == [0, 0, 1, 2, 3, 3]
    assert count_accepted(surv, u, 1).tolist() == [0, 0, 1, 1, 1, 1]
    assert count_accepted(surv, u, 0).tolist() == [0] * 6
    # K beyond the profile: positions without a rate accept nothing.
    assert count_accepted(surv, u, 7).max() == 3


@pytest.mark.parametrize("profile", [EAGLE_MT_BENCH, EAGLE3_MT_BENCH])
def test_sampled_acceptance_length_matches_al_in_expectation(profile: Profile) -> None:
    rng = np.random.default_rng(3)
    u = rng.random(200_000)
    surv = survival(profile.per_position)
    expected = acceptance_lengths(profile.per_position, profile.positions)
    for k in range(profile.positions + 1):
        n = count_accepted(surv, u, k)
        sd = float(np.std(n)) / np.sqrt(u.size)
        assert abs(float(np.mean(n + 1)) - expected[k]) < 4 * sd + 1e-12


def test_common_random_numbers_give_nested_counts_across_k() -> None:
    rng = np.random.default_rng(5)
    u = rng.random(10_000)
    surv = survival(EAGLE_MT_BENCH.per_position)
    full = count_accepted(surv, u, 7)
    for k in range(8):
        assert np.array_equal(count_accepted(surv, u, k), np.minimum(full, k))


def test_eagle3_profile_has_the_reported_acceptance_length() -> None:
    # vLLM #26191: AL 3.53 at K=7 on MT-Bench for Llama-3.1-8B.
    assert EAGLE3_MT_BENCH.acceptance_length(7) == pytest.approx(3.5, abs=0.1)
    assert survival(EAGLE3_MT_BENCH.per_position)[6] < 0.1
    assert EAGLE3_MT_BENCH.acceptance_length(3) > EAGLE_MT_BENCH.acceptance_length(3)


def test_profile_rejects_rates_outside_unit_interval() -> None:
    with pytest.raises(ValueError):
        Profile((0.5, 1.2))
    with pytest.raises(ValueError):
        Profile(())


def test_drift_moves_from_before_to_after_over_the_ramp() -> None:
    before, after = Profile((0.8, 0.7)), Profile((0.4, 0.3, 0.2))
    drift = Drifting(before, after, at=10.0, ramp=4.0)
    assert drift.positions == 3
    assert list(drift.rates_at(0, 9.9)) == pytest.approx([0.8, 0.7, 0.0])
    assert list(drift.rates_at(0, 12.0)) == pytest.approx([0.6, 0.5, 0.1])
    assert list(drift.rates_at(0, 20.0)) == pytest.approx([0.4, 0.3, 0.2])
    by_step = Drifting(before, after, at=100, clock="steps")
    assert by_step.weight(99, 1e9) == 0.0
    assert by_step.weight(100, 0.0) == 1.0
    with pytest.raises(ValueError):
        Drifting(before, after, at=1.0, clock="tokens")


def test_drift_sampler_follows_the_clock() -> None:
    drift = Drifting(Profile((0.9,)), Profile((0.1,)), at=5.0)
    sampler = drift.sampler(4, np.random.default_rng(0))
    u = np.full(4, 0.5)
    mask = np.ones(4, dtype=bool)
    assert sampler.accepted(u, mask, 1, 0, 1.0).tolist() == [1, 1, 1, 1]
    assert sampler.accepted(u, mask, 1, 1, 6.0).tolist() == [0, 0, 0, 0]


def _bursty_counts(model: Bursty, slots: int, steps: int, k: int) -> npt.NDArray[np.int64]:
    rng = np.random.default_rng(11)
    sampler = model.sampler(slots, np.random.default_rng(12))
    sampler.admit(np.arange(slots))
    mask = np.ones(slots, dtype=bool)
    counts = np.empty((steps, slots), dtype=np.int64)
    for t in range(steps):
        counts[t] = sampler.accepted(rng.random(slots), mask, k, t, 0.0)
    return counts


def test_bursty_acceptance_matches_its_nominal_mix() -> None:
    counts = _bursty_counts(NGRAM_CHAT, 64, 4000, 3)
    assert float(np.mean(counts + 1)) == pytest.approx(
        float(acceptance_lengths(NGRAM_CHAT.nominal(), 3)[3]), rel=0.03
    )


def test_bursty_acceptance_comes_in_bursts() -> None:
    model = Bursty(Profile((0.1, 0.1, 0.1)), Profile((0.95, 0.95, 0.95)), 0.04, 0.12)
    full = _bursty_counts(model, 64, 4000, 3) == 3
    # A full acceptance is followed by another far more often than average.
    assert full[1:][full[:-1]].mean() > 2 * full.mean()


def test_bursty_stationary_fraction() -> None:
    b = Bursty(Profile((0.1,)), Profile((0.9,)), p_enter=0.1, p_exit=0.3)
    assert b.hit_fraction == pytest.approx(0.25)
    assert b.nominal()[0] == pytest.approx(0.75 * 0.1 + 0.25 * 0.9)


def test_mixture_gives_each_request_one_class_and_pools_like_the_counts() -> None:
    from specdeploy.runtime.sim.acceptance import ClassedSampler, Mixture

    high, low = Profile((0.9, 0.8)), Profile((0.3, 0.2))
    mix = Mixture((high, low), (0.25, 0.75))
    sampler = mix.sampler(4000, np.random.default_rng(2))
    assert isinstance(sampler, ClassedSampler)
    sampler.admit(np.arange(4000))
    classes = sampler.slot_classes.copy()
    assert float(np.mean(classes == 0)) == pytest.approx(0.25, abs=0.02)
    u = np.random.default_rng(3).random(4000)
    counts = sampler.accepted(u, np.ones(4000, dtype=bool), 2, 0, 0.0)
    assert np.array_equal(sampler.slot_classes, classes)  # a request keeps its class
    # Pooled counts estimate the mixture's conditional rates.
    reached1, acc1 = 4000, int(np.sum(counts >= 1))
    acc2 = int(np.sum(counts >= 2))
    assert acc1 / reached1 == pytest.approx(mix.nominal()[0], abs=0.02)
    assert acc2 / acc1 == pytest.approx(mix.nominal()[1], abs=0.03)
    with pytest.raises(ValueError):
        Mixture((high,), (0.5,))
