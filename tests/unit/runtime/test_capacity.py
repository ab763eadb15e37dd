"""A replica's capacity within a latency target, from the goodput grid and its K table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdeploy.runtime.capacity import Limit, plain_decoding_grid, replica_capacity
from specdeploy.runtime.goodput import FloatArray

pytestmark = pytest.mark.unit


def grid(rows: dict[int, tuple[float, float]]) -> FloatArray:
    """Goodput [bs, K] for K = 0, 1 (tokens/s per sequence); row 0 and missing rows NaN."""
    out = np.full((max(rows) + 1, 2), np.nan)
    for bs, values in rows.items():
        out[bs] = values
    return out


# Per-sequence tokens/s: speculation (K=1) wins at small batches and loses at large ones.
G = grid({1: (100.0, 150.0), 2: (95.0, 130.0), 4: (90.0, 95.0), 8: (80.0, 60.0)})
ADAPTIVE = [(1, 3, 1), (4, 8, 0)]  # K=1 up to batch 3, plain decoding from 4


def test_without_a_target_the_capacity_is_the_best_total_rate_under_the_table() -> None:
    cap = replica_capacity(G, ADAPTIVE, tpot_target_s=None)

    assert cap is not None
    # 8 sequences at K=0: 8 * 80 = 640 tokens/s beats 4 * 90 and 2 * 130.
    assert (cap.batch_size, cap.k, cap.tokens_per_second) == (8, 0, 640.0)
    assert cap.limited_by is Limit.BATCH


def test_a_latency_target_stops_the_batch_where_a_sequence_would_get_slower_tokens() -> None:
    # 1/90 s = 11.1 ms per token at batch 4 passes a 12 ms target; batch 8's 12.5 ms does not.
    cap = replica_capacity(G, ADAPTIVE, tpot_target_s=0.012)

    assert cap is not None
    assert (cap.batch_size, cap.k) == (4, 0)
    assert cap.tokens_per_second == pytest.approx(360.0)
    assert cap.tpot_seconds == pytest.approx(1 / 90)
    assert cap.limited_by is Limit.LATENCY


def test_the_k_table_decides_the_capacity_not_the_best_k_alone() -> None:
    # A fixed K=1 table is slower per sequence at batch 8 (60 tokens/s): less capacity.
    fixed = replica_capacity(G, [(1, 8, 1)], tpot_target_s=None)
    adaptive = replica_capacity(G, ADAPTIVE, tpot_target_s=None)

    assert fixed is not None and adaptive is not None
    assert fixed.tokens_per_second == pytest.approx(480.0)  # 8 * 60
    assert fixed.tokens_per_second < adaptive.tokens_per_second


def test_no_batch_within_the_target_is_none_and_a_bad_target_is_refused() -> None:
    assert replica_capacity(G, ADAPTIVE, tpot_target_s=0.001) is None
    with pytest.raises(ValueError, match="tpot_target_s"):
        replica_capacity(G, ADAPTIVE, tpot_target_s=0)


def test_max_num_seqs_bounds_the_batch_and_unpriced_rows_are_never_chosen() -> None:
    cap = replica_capacity(G, ADAPTIVE, tpot_target_s=None, max_batch_size=5)

    assert cap is not None
    # Batch 3 and 5 are NaN (not priced): the best priced batch up to 5 is 4.
    assert cap.batch_size == 4
    assert cap.limited_by is Limit.BATCH


def test_a_plain_decoding_pool_is_sized_from_its_step_times() -> None:
    plain = plain_decoding_grid([None, 10.0, 11.0, None, 12.5])
    cap = replica_capacity(plain, [(1, 4, 0)], tpot_target_s=0.012)

    assert cap is not None
    # 1000/11 ms = 90.9 tokens/s per sequence at batch 2 (11 ms); batch 4's 12.5 ms fails.
    assert cap.batch_size == 2
    assert cap.tokens_per_second == pytest.approx(2 * 1000 / 11)
    assert math.isnan(plain[3, 0])


def test_on_the_measured_cpu_profile_higher_live_acceptance_means_more_capacity() -> None:
    from pathlib import Path

    from specdeploy.runtime.profile import load_profile
    from specdeploy.runtime.schedule import derive_schedule, goodput_grid

    spec = load_profile(Path(__file__).parents[3] / "profiles/smollm2-135m-ngram-cpu.yaml").spec
    table = derive_schedule(spec)
    rates = list(spec.acceptance.per_position)
    # A 30 ms target is met only at the small batches where the table speculates (K=3).
    high = replica_capacity(goodput_grid(spec, per_position=rates), table, tpot_target_s=0.030)
    low = replica_capacity(
        goodput_grid(spec, per_position=[r * 0.8 for r in rates]), table, tpot_target_s=0.030
    )
    unbounded = replica_capacity(goodput_grid(spec), table, tpot_target_s=None)

    assert high is not None and low is not None and unbounded is not None
    assert high.k > 0 and high.limited_by is Limit.LATENCY
    assert high.tokens_per_second > low.tokens_per_second
    # Without a target the batch grows to the profile's largest, where the table runs K=0.
    assert unbounded.k == 0 and unbounded.batch_size > high.batch_size
