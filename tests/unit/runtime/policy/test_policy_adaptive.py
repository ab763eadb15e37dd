"""AdaptivePolicy's behaviour against a small synthetic engine with known truth.

The engine: a dense-model-like step-time grid (verifying bs x (K + 1) tokens
costs more as the batch grows, so the best K falls with batch size), and
acceptance drawn per position from known rates. Since the truth is known, each
test can say what the right K is and check that the policy gets there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdeploy.runtime.goodput import FloatArray, acceptance_lengths, conditional_counts
from specdeploy.runtime.policy import AdaptiveConfig, AdaptivePolicy, TablePolicy
from specdeploy.runtime.policy.base import StepRecord

MAX_BS, MAX_K = 256, 5
PRIOR = [0.8] * MAX_K
NO_EXPLORATION = AdaptiveConfig(explore_interval=0)


def dense_grid() -> FloatArray:
    """ITL ms = 5 + 0.2 K + 0.1 bs (K + 1): best K 5 at bs 1 falling to 0 at bs >= 190."""
    bs = np.arange(MAX_BS + 1, dtype=np.float64)[:, np.newaxis]
    k = np.arange(MAX_K + 1, dtype=np.float64)[np.newaxis, :]
    grid: FloatArray = 5.0 + 0.2 * k + 0.1 * bs * (k + 1)
    grid[0] = np.nan
    return grid


def true_goodput(grid: FloatArray, rates: Sequence[float]) -> FloatArray:
    """Tokens/s per sequence for every (bs, K) under the true acceptance."""
    result: FloatArray = acceptance_lengths(rates, grid.shape[1] - 1)[np.newaxis, :] / grid * 1e3
    return result


def true_best(grid: FloatArray, rates: Sequence[float]) -> list[int]:
    best: list[int] = np.argmax(np.nan_to_num(true_goodput(grid, rates), nan=-1.0), axis=1).tolist()
    return best


class Engine:
    """Runs steps against a policy: draws acceptance, times the step from the true grid."""

    def __init__(self, policy: AdaptivePolicy, grid: FloatArray, seed: int = 0) -> None:
        self.policy = policy
        self.grid = grid
        self.rng = np.random.default_rng(seed)

    def step(self, batch_size: int, rates: Sequence[float]) -> int:
        k = self.policy.choose_k(batch_size)
        drafted, accepted = [0] * k, [0] * k
        alive = batch_size
        for i in range(k):
            drafted[i] = alive
            alive = int(self.rng.binomial(alive, rates[i]))
            accepted[i] = alive
        seconds = float(self.grid[min(batch_size, MAX_BS), k]) / 1e3
        self.policy.observe(StepRecord(batch_size, k, seconds, drafted, drafted, accepted))
        return k

    def run(
        self, steps: int, batch_size: Callable[[int], int], rates: Sequence[float]
    ) -> list[int]:
        return [self.step(batch_size(t), rates) for t in range(steps)]


def switches(ks: Sequence[int]) -> int:
    return sum(a != b for a, b in itertools.pairwise(ks))


# --- K follows the batch size ------------------------------------------------


def test_k_follows_the_batch_size_on_a_dense_grid() -> None:
    grid = dense_grid()
    truth = true_goodput(grid, PRIOR)
    policy = AdaptivePolicy(grid, PRIOR, config=NO_EXPLORATION)
    chosen = {}
    for bs in (1, 4, 8, 16, 32, 64, 128, 190, 256):
        for _ in range(60):  # long enough for the batch-size EMA to settle
            k = policy.choose_k(bs)
        chosen[bs] = k
        assert truth[bs, k] * (1 + policy.config.switch_margin) >= truth[bs].max()
    assert chosen[1] == 5
    assert chosen[256] <= 1  # K=1 is within the margin of K=0 there
    ks = list(chosen.values())
    assert ks == sorted(ks, reverse=True)
    assert len(set(ks)) >= 4


def test_k_follows_the_batch_size_while_learning_from_live_steps() -> None:
    grid = dense_grid()
    truth = true_goodput(grid, PRIOR)
    engine = Engine(AdaptivePolicy(grid, PRIOR), grid, seed=3)
    margin = engine.policy.config.switch_margin
    for bs in (2, 40, 250, 10):
        for _ in range(300):
            engine.step(bs, PRIOR)
        k = engine.policy.current_k
        assert truth[bs, k] * (1 + margin) >= truth[bs].max()


# --- no thrashing ------------------------------------------------------------


def test_jitter_around_a_threshold_makes_no_switches_where_the_table_flips_every_step() -> None:
    grid = dense_grid()
    best = true_best(grid, PRIOR)
    threshold = next(bs for bs in range(3, MAX_BS - 2) if best[bs - 2] != best[bs + 2])
    table = TablePolicy(best)
    engine = Engine(AdaptivePolicy(grid, PRIOR), grid, seed=1)
    engine.run(100, lambda t: threshold, PRIOR)

    def jitter(t: int) -> int:
        return threshold - 2 if t % 2 else threshold + 2

    table_ks = [table.choose_k(jitter(t)) for t in range(1000)]
    before = engine.policy.switches
    adaptive_ks = engine.run(1000, jitter, PRIOR)
    assert switches(table_ks) == 999
    assert engine.policy.switches - before <= 1
    exploring = engine.policy.exploration_steps
    assert switches(adaptive_ks) <= 2 * exploring + 1


def test_hysteresis_alone_holds_without_smoothing() -> None:
    """With the batch-size EMA off, the margin still absorbs a +-2 jitter."""
    grid = dense_grid()
    best = true_best(grid, PRIOR)
    config = AdaptiveConfig(bs_smoothing=1.0, explore_interval=0, min_dwell_steps=0)
    policy = AdaptivePolicy(grid, PRIOR, config=config)
    thresholds = [bs for bs in range(3, 100) if best[bs - 2] != best[bs + 2]]
    assert thresholds
    for threshold in thresholds:
        ks = [policy.choose_k(threshold + (2 if t % 2 else -2)) for t in range(200)]
        assert switches(ks[10:]) == 0


def test_min_dwell_limits_the_switch_rate() -> None:
    grid = dense_grid()
    config = AdaptiveConfig(bs_smoothing=1.0, explore_interval=0, min_dwell_steps=8)
    policy = AdaptivePolicy(grid, PRIOR, config=config)
    # the best K at either size beats K=0 at the other, so dwell applies both ways
    ks = [policy.choose_k(1 if t % 2 else 20) for t in range(400)]
    assert 0 < switches(ks) <= 400 // 8 + 1


def test_dwell_never_keeps_a_k_worse_than_plain_decoding() -> None:
    grid = dense_grid()
    config = AdaptiveConfig(bs_smoothing=1.0, explore_interval=0, min_dwell_steps=1000)
    policy = AdaptivePolicy(grid, PRIOR, config=config)
    assert policy.choose_k(1) == 5
    assert policy.choose_k(2) == 5
    assert policy.choose_k(256) <= 1  # K=5 at 256 is far below K=0: left at once


# --- drift -------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_falling_acceptance_moves_k_to_the_new_optimum(seed: int) -> None:
    grid = dense_grid()
    bs = 16
    before, after = true_best(grid, [0.8] * MAX_K)[bs], true_best(grid, [0.5] * MAX_K)[bs]
    assert (before, after) == (3, 1)
    engine = Engine(AdaptivePolicy(grid, PRIOR), grid, seed=seed)
    assert engine.run(1500, lambda t: bs, [0.8] * MAX_K)[-1] == before
    for t in range(500):  # acceptance falls linearly from 0.8 to 0.5
        engine.step(bs, [0.8 - 0.3 * t / 500] * MAX_K)
    ks = engine.run(2500, lambda t: bs, [0.5] * MAX_K)
    arrived = ks.index(after)
    assert arrived < 1500
    current = []
    for _ in range(500):
        engine.step(bs, [0.5] * MAX_K)
        current.append(engine.policy.current_k)
    assert set(current) == {after}
    assert engine.policy.estimates().acceptance[0] == pytest.approx(0.5, abs=0.03)


def test_rising_acceptance_moves_k_up_through_the_shared_drift() -> None:
    """Positions beyond the K in use are never drafted; the drift of those that are
    tells the policy that they have risen too."""
    grid = dense_grid()
    bs = 16
    low = [0.5] * MAX_K
    engine = Engine(AdaptivePolicy(grid, low, config=NO_EXPLORATION), grid, seed=4)
    assert engine.run(300, lambda t: bs, low)[-1] == true_best(grid, low)[bs] == 1
    high = [0.85] * MAX_K
    engine.run(3000, lambda t: bs, high)
    truth = true_goodput(grid, high)[bs]
    k = engine.policy.current_k
    assert k >= 3
    assert truth[k] * (1 + engine.policy.config.switch_margin) >= truth.max()


def test_unobserved_positions_fall_back_on_the_prior() -> None:
    prior = [0.9, 0.8, 0.7, 0.6, 0.5]
    config = AdaptiveConfig(share_acceptance_drift=False, explore_interval=0)
    policy = AdaptivePolicy(dense_grid(), prior, config=config)
    assert policy.estimates().acceptance == tuple(prior)
    for _ in range(200):
        policy.observe(StepRecord(8, 2, None, [8, 4], [8, 4], [4, 1]))
    acceptance = policy.estimates().acceptance
    assert acceptance[0] < 0.6
    assert acceptance[1] < 0.4
    assert acceptance[2:] == tuple(prior[2:])
    assert policy.estimates().acceptance_samples[2:] == (0.0, 0.0, 0.0)


def test_shared_drift_shifts_unobserved_positions_the_same_way() -> None:
    prior = [0.9, 0.8, 0.7, 0.6, 0.5]
    policy = AdaptivePolicy(dense_grid(), prior, config=NO_EXPLORATION)
    for _ in range(200):
        policy.observe(StepRecord(8, 2, None, [8, 4], [8, 4], [4, 1]))
    estimates = policy.estimates()
    assert estimates.acceptance_drift < -1.0
    assert all(a < p for a, p in zip(estimates.acceptance[2:], prior[2:], strict=True))


# --- step-time corrections ---------------------------------------------------


def test_slower_large_k_steps_make_the_policy_prefer_a_smaller_k() -> None:
    profile = dense_grid()
    truth = profile.copy()
    truth[:, 3:] *= 1.5
    bs = 4
    assert true_best(profile, PRIOR)[bs] == 5
    target = true_best(truth, PRIOR)[bs]
    assert target <= 2
    engine = Engine(AdaptivePolicy(profile, PRIOR), truth, seed=5)
    ks = engine.run(3000, lambda t: bs, PRIOR)
    settled = [engine.step(bs, PRIOR) or engine.policy.current_k for _ in range(300)]
    assert ks.index(target) < 2000
    assert set(settled) == {target}
    corrections = engine.policy.estimates().itl_correction
    assert corrections[(3, 4, 5)] == pytest.approx(1.5, abs=0.1)
    assert corrections[(3, 4, target)] == pytest.approx(1.0, abs=0.1)


def test_corrections_are_shared_with_cells_never_observed() -> None:
    policy = AdaptivePolicy(dense_grid(), PRIOR, config=NO_EXPLORATION)
    grid = dense_grid()
    for _ in range(policy.config.recompute_interval):
        policy.observe(StepRecord(1, 5, 1.5 * grid[1, 5] / 1e3, [], [], []))
    corrections = policy.estimates().itl_correction
    assert corrections[(1, 1, 5)] == pytest.approx(1.5, abs=0.05)
    assert corrections[(2, 2, 5)] > 1.35  # the neighbouring bucket
    assert corrections[(129, 256, 5)] > 1.35  # the same K, far away
    assert 1.1 < corrections[(1, 1, 0)] < 1.35  # another K: part of the global deviation
    assert policy.explain(1)[5].itl_ms == pytest.approx(grid[1, 5] * corrections[(1, 1, 5)])


def test_corrections_are_bounded_and_ignore_untimed_steps() -> None:
    policy = AdaptivePolicy(dense_grid(), PRIOR, config=NO_EXPLORATION)
    for _ in range(200):
        policy.observe(StepRecord(8, 2, 100.0, [8, 6], [8, 6], [6, 4]))
        policy.observe(StepRecord(9, 3, None, [8, 6, 4], [8, 6, 4], [6, 4, 2]))
    corrections = policy.estimates().itl_correction
    assert max(corrections.values()) <= policy.config.itl_correction_max
    assert corrections[(5, 8, 2)] == pytest.approx(policy.config.itl_correction_max, abs=0.01)
    assert policy.estimates().itl_samples[(9, 16, 3)] == 0.0


# --- exploration -------------------------------------------------------------


def test_exploration_is_rare_bounded_in_loss_and_visits_stale_k_first() -> None:
    grid = dense_grid()
    bs = 16
    truth = true_goodput(grid, PRIOR)[bs]
    config = AdaptiveConfig(explore_interval=50, explore_min_staleness=100)
    engine = Engine(AdaptivePolicy(grid, PRIOR, config=config), grid, seed=6)
    explored = []
    steps = 10_000
    for _ in range(steps):
        k = engine.step(bs, PRIOR)
        current = engine.policy.current_k
        if k != current:
            explored.append(k)
            assert truth[k] >= (1 - config.explore_max_loss) * truth[current] * 0.99
    assert engine.policy.exploration_steps == len(explored)
    assert 0 < len(explored) <= steps / (0.75 * config.explore_interval) + 1
    eligible = {k for k in range(MAX_K + 1) if truth[k] >= 0.9 * truth[3] and k != 3}
    assert eligible == {2, 4, 5}
    assert set(explored) == eligible
    assert len(set(explored[:3])) == 3  # each stale K before any fresh one again


def test_exploration_off_never_leaves_the_best_k() -> None:
    grid = dense_grid()
    engine = Engine(AdaptivePolicy(grid, PRIOR, config=NO_EXPLORATION), grid, seed=7)
    assert set(engine.run(5000, lambda t: 16, PRIOR)) == {3}
    assert engine.policy.exploration_steps == 0


def test_exploration_skips_k_observed_recently() -> None:
    grid = dense_grid()
    config = AdaptiveConfig(explore_interval=20, explore_min_staleness=10_000)
    policy = AdaptivePolicy(grid, PRIOR, config=config)
    for k in range(MAX_K + 1):
        policy.observe(StepRecord(16, k, None, [], [], []))
    assert {policy.choose_k(16) for _ in range(2000)} == {3}
    assert policy.exploration_steps == 0


# --- explain / estimates -------------------------------------------------------


def test_explain_reports_goodput_as_acceptance_length_over_itl() -> None:
    grid = dense_grid()
    policy = AdaptivePolicy(grid, PRIOR, config=NO_EXPLORATION)
    k = policy.choose_k(32)
    report = policy.explain(32)
    assert sorted(report) == list(range(MAX_K + 1))
    assert [e.k for e in report.values() if e.chosen] == [k]
    lengths = acceptance_lengths(PRIOR, MAX_K)
    for key, e in report.items():
        assert e.acceptance_length == pytest.approx(lengths[key])
        assert e.itl_ms == pytest.approx(grid[32, key])
        assert e.goodput == pytest.approx(1e3 * e.acceptance_length / e.itl_ms)


def test_explain_leaves_out_unavailable_cells() -> None:
    grid = dense_grid()
    grid[100:, 4:] = np.nan
    policy = AdaptivePolicy(grid, PRIOR, config=NO_EXPLORATION)
    assert sorted(policy.explain(99)) == [0, 1, 2, 3, 4, 5]
    assert sorted(policy.explain(100)) == [0, 1, 2, 3]


def test_estimates_count_steps_switches_and_generations() -> None:
    grid = dense_grid()
    engine = Engine(AdaptivePolicy(grid, PRIOR), grid, seed=8)
    engine.run(640, lambda t: 1 if t < 320 else 200, PRIOR)
    estimates = engine.policy.estimates()
    assert estimates.steps == 640
    assert estimates.generation == 1 + 640 // engine.policy.config.recompute_interval
    assert estimates.switches == engine.policy.switches >= 1
    assert estimates.current_k in (0, 1)  # K=1 is within the margin of K=0 at 200
    assert len(estimates.acceptance) == MAX_K
    assert estimates.acceptance_samples[0] > 0


# --- properties under arbitrary input --------------------------------------------


def property_grid() -> FloatArray:
    """Dense grid with an unavailable region (K >= 4 beyond batch size 60)."""
    grid = dense_grid()
    grid[61:, 4:] = np.nan
    return grid


steps_strategy = st.lists(
    st.tuples(
        st.integers(-2, 400),  # batch size, including out-of-range ones
        st.integers(0, MAX_K),  # the K the engine reports it ran
        st.one_of(st.none(), st.floats(1e-5, 10.0)),  # step seconds
        st.lists(st.integers(0, MAX_K), max_size=8),  # accepted drafts per sequence
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(
    steps=steps_strategy,
    allowed=st.sets(st.integers(0, MAX_K)),
    small=st.integers(0, 3),  # some K available at every batch size
    smoothing=st.floats(0.05, 1.0),
)
def test_k_is_always_in_the_allowed_set(
    steps: list[tuple[int, int, float | None, list[int]]],
    allowed: set[int],
    small: int,
    smoothing: float,
) -> None:
    allowed = allowed | {small}
    config = AdaptiveConfig(
        recompute_interval=3, explore_interval=4, explore_min_staleness=2, bs_smoothing=smoothing
    )
    policy = AdaptivePolicy(property_grid(), PRIOR, allowed_k=sorted(allowed), config=config)
    for bs, k, seconds, per_seq in steps:
        assert policy.choose_k(bs) in allowed
        drafted, accepted = conditional_counts(per_seq, k)
        policy.observe(StepRecord(bs, k, seconds, drafted, drafted, accepted))


@settings(max_examples=60, deadline=None)
@given(steps=steps_strategy, dwell=st.integers(0, 20))
def test_never_chooses_a_k_below_k0_by_more_than_the_margin(
    steps: list[tuple[int, int, float | None, list[int]]], dwell: int
) -> None:
    config = AdaptiveConfig(recompute_interval=3, explore_interval=0, min_dwell_steps=dwell)
    policy = AdaptivePolicy(property_grid(), PRIOR, config=config)
    for bs, k, seconds, per_seq in steps:
        chosen = policy.choose_k(bs)
        row = min(max(int(policy.smoothed_batch_size + 0.5), 1), MAX_BS)
        report = policy.explain(row)
        assert chosen in report
        assert report[chosen].goodput * (1 + config.switch_margin) >= report[0].goodput
        drafted, accepted = conditional_counts(per_seq, k)
        policy.observe(StepRecord(bs, k, seconds, drafted, drafted, accepted))
