"""The true-loss arithmetic of bench/profiler_search.py on cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest

# bench/ is scripts beside the package; the checkout's root is on pytest's path.
from bench.profiler_search import true_goodput_grid, true_loss
from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.profiling import profile_cell


def _truth(rows: list[list[float]]) -> np.ndarray:
    """A goodput grid from rows for batch sizes 1..n (row 0 unused, NaN)."""
    grid = np.full((len(rows) + 1, len(rows[0])), np.nan)
    grid[1:] = rows
    return grid


def test_true_loss_by_hand() -> None:
    # Batch sizes 1..4, K 0..2. Best K: 2, 2, 1, 0 (goodput 10, 8, 6, 5).
    truth = _truth([[5, 8, 10], [5, 7, 8], [5, 6, 4], [5, 4, 2]])
    # The table picks 2, 1, 1, 1: right at 1 and 3, loses 1/8 at 2 and 1/5 at 4.
    chosen = np.array([0, 2, 1, 1, 1], dtype=np.int64)
    got = true_loss(truth, chosen)
    # Profiled sizes 1, 2, 4 (SIZES up to 4): max(0, 0.125, 0.2).
    assert got["trueMaxLossAtProfiledSizes"] == pytest.approx(0.2)
    assert got["trueMeanLossAllBatchSizes"] == pytest.approx((0.125 + 0.2) / 4)
    assert got["trueMaxLossAllBatchSizes"] == pytest.approx(0.2)


def test_true_loss_at_profiled_sizes_skips_the_others() -> None:
    # Batch size 3 is not a profiled size: a loss there counts in the mean
    # and the overall max only.
    truth = _truth([[1, 2], [1, 2], [1, 4], [1, 2]])
    chosen = np.array([0, 1, 1, 0, 1], dtype=np.int64)
    got = true_loss(truth, chosen)
    assert got["trueMaxLossAtProfiledSizes"] == 0.0
    assert got["trueMeanLossAllBatchSizes"] == pytest.approx(0.75 / 4)
    assert got["trueMaxLossAllBatchSizes"] == pytest.approx(0.75)


def test_true_loss_of_the_optimum_is_zero() -> None:
    truth = _truth([[3, 1], [1, 3]])
    assert set(true_loss(truth, np.array([0, 0, 1])).values()) == {0.0}


def test_true_loss_needs_a_k_per_batch_size() -> None:
    with pytest.raises(ValueError, match="batch size"):
        true_loss(_truth([[1, 2], [1, 2]]), np.array([0, 1], dtype=np.int64))


@pytest.mark.parametrize(("bs", "k"), [(1, 0), (8, 3), (32, 5)])
def test_truth_is_a_jitter_free_profiling_repeat(bs: int, k: int) -> None:
    """The truth grid's ITL is what profile_cell measures without jitter (within 0.1%)."""
    preset = get_preset("llama70b-eagle3-mi300x")
    truth = true_goodput_grid(preset.name, 32)
    al = acceptance_lengths(preset.nominal_rates(), preset.max_k)[k]
    measured_itl_s = profile_cell(preset, bs, k, steps=32, seed=7).itl_ms / 1e3
    assert al / truth[bs, k] == pytest.approx(measured_itl_s, rel=1e-3)
