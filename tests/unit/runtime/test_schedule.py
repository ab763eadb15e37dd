"""specdeploy.runtime.schedule: grids, best K, derived schedules and vLLM's table rules."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.profile import ProfileSpec, load_profile, parse_profile
from specdeploy.runtime.ranges import (
    ScheduleError,
    compress,
    expand_lookup,
    format_schedule,
    from_vllm,
    schedule_problems,
    to_vllm,
)
from specdeploy.runtime.schedule import (
    best_k_per_batch_size,
    derive_schedule,
    goodput_grid,
    itl_grid,
    k_values,
)
from tests.paths import EXAMPLES, FIXTURES

FIXTURES = FIXTURES
EXAMPLE = EXAMPLES / "profile-example.yaml"

Cells = dict[tuple[int, int], float]


def make_spec(cells: Cells, per_position: Sequence[float], max_k: int) -> ProfileSpec:
    """A validated ProfileSpec from {(batch size, K): ITL ms}."""
    rows = [{"batchSize": bs, "k": k, "itlMs": itl} for (bs, k), itl in sorted(cells.items())]
    doc = parse_profile(
        {
            "spec": {
                "fingerprint": {"model": "m", "method": "eagle3", "gpuType": "G", "maxK": max_k},
                "source": "modelled",
                "measurements": rows,
                "acceptance": {"perPosition": list(per_position)},
            }
        }
    )
    return doc.spec


@st.composite
def profiles(draw: st.DrawFn) -> ProfileSpec:
    """Random valid profiles: K=0 at every batch size, any sparse subset of other cells."""
    max_k = draw(st.integers(1, 6))
    sizes = sorted(draw(st.sets(st.integers(1, 300), min_size=1, max_size=6)))
    itl = st.floats(0.5, 200.0, allow_nan=False, allow_infinity=False)
    cells: Cells = {}
    for bs in sizes:
        for k in {0} | draw(st.sets(st.integers(1, max_k), max_size=max_k)):
            cells[(bs, k)] = draw(itl)
    rates = draw(st.lists(st.floats(0.0, 1.0), min_size=max_k, max_size=max_k))
    return make_spec(cells, rates, max_k)


def measured(spec: ProfileSpec, k: int) -> list[tuple[int, float]]:
    return sorted((m.batch_size, m.itl_ms) for m in spec.measurements if m.k == k)


def vllm_reference_lookup(ranges: list[list[int]], num_spec: int, max_bs: int) -> list[int]:
    """vLLM's build_dynamic_sd_schedule_lookup, restated step by step (sequential fill)."""
    dense = [0] * (max_bs + 1)
    next_bs, last_k = 1, None
    for lo, hi, k in sorted(ranges, key=lambda r: r[0]):
        if lo > next_bs and last_k is not None:
            for bs in range(next_bs, min(lo, max_bs + 1)):
                dense[bs] = min(num_spec, last_k)
        for bs in range(max(lo, next_bs), min(hi, max_bs) + 1):
            dense[bs] = min(num_spec, k)
        next_bs = max(next_bs, hi + 1)
        last_k = k
        if next_bs > max_bs:
            break
    assert last_k is not None
    for bs in range(next_bs, max_bs + 1):
        dense[bs] = min(num_spec, last_k)
    return dense


@st.composite
def vllm_tables(draw: st.DrawFn) -> list[list[int]]:
    """Tables vLLM accepts: from 1, non-overlapping, gaps allowed, any K >= 0, any order."""
    starts = sorted(draw(st.sets(st.integers(2, 400), max_size=6)) | {1})
    table = []
    for i, lo in enumerate(starts):
        limit = starts[i + 1] - 1 if i + 1 < len(starts) else 600
        hi = draw(st.integers(lo, limit))
        table.append([lo, hi, draw(st.integers(0, 9))])
    return draw(st.permutations(table))


# --- itl_grid --------------------------------------------------------------

SPARSE: Cells = {
    (1, 0): 5.0,
    (1, 1): 5.2,
    (4, 0): 5.6,
    (4, 1): 6.4,
    (4, 2): 7.0,
    (16, 0): 8.0,
    (16, 1): 9.0,
    (16, 2): 12.0,
    (64, 0): 12.0,
    (64, 1): 16.0,
}


def test_itl_grid_shape_and_unused_row_zero() -> None:
    grid = itl_grid(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3))
    assert grid.shape == (65, 4)
    assert grid.dtype == np.float64
    assert np.isnan(grid[0]).all()


def test_itl_grid_is_exact_at_measured_cells() -> None:
    grid = itl_grid(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3))
    for (bs, k), itl in SPARSE.items():
        assert grid[bs, k] == itl


def test_itl_grid_interpolates_linearly_between_measured_batch_sizes() -> None:
    grid = itl_grid(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3))
    assert grid[10, 0] == pytest.approx(5.6 + (8.0 - 5.6) * 6 / 12)
    assert grid[40, 1] == pytest.approx(9.0 + (16.0 - 9.0) * 24 / 48)
    assert grid[2, 1] == pytest.approx(5.2 + (6.4 - 5.2) / 3)


def test_itl_grid_outside_a_ks_span_is_unavailable_unless_at_the_profile_edge() -> None:
    grid = itl_grid(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3))
    # K=2 measured at 4 and 16 only: not at the profile's smallest (1) nor largest (64).
    assert np.isnan(grid[1:4, 2]).all()
    assert np.isnan(grid[17:, 2]).all()
    assert not np.isnan(grid[4:17, 2]).any()
    # K=3 is never measured.
    assert np.isnan(grid[:, 3]).all()


def test_itl_grid_holds_edge_values_beyond_the_profile() -> None:
    cells: Cells = {(2, 0): 5.0, (2, 1): 5.5, (8, 0): 6.0, (8, 1): 7.0, (8, 2): 7.5}
    grid = itl_grid(make_spec(cells, [0.8, 0.6], max_k=2), max_batch_size=20)
    assert grid.shape == (21, 3)
    assert grid[1, 0] == 5.0 and grid[1, 1] == 5.5  # below the smallest measured: held
    assert (grid[9:, 0] == 6.0).all() and (grid[9:, 1] == 7.0).all()  # above: held
    assert (grid[9:, 2] == 7.5).all()  # K=2 measured at the largest batch size only
    assert np.isnan(grid[1:8, 2]).all()  # ... and not below it


def test_itl_grid_max_batch_size_can_cut_the_grid() -> None:
    grid = itl_grid(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3), max_batch_size=10)
    assert grid.shape == (11, 4)
    assert grid[10, 0] == pytest.approx(6.8)


def test_itl_grid_rejects_a_non_positive_max_batch_size() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        itl_grid(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3), max_batch_size=0)


@given(profiles())
def test_itl_grid_property_exact_linear_and_available_where_it_should_be(
    spec: ProfileSpec,
) -> None:
    grid = itl_grid(spec)
    sizes = sorted({m.batch_size for m in spec.measurements})
    assert grid.shape == (sizes[-1] + 1, spec.fingerprint.max_k + 1)
    assert not np.isnan(grid[1:, 0]).any()  # K=0 everywhere
    for k in range(spec.fingerprint.max_k + 1):
        points = measured(spec, k)
        if not points:
            assert np.isnan(grid[:, k]).all()
            continue
        for bs, itl in points:
            assert grid[bs, k] == itl
        for (a, ya), (b, yb) in itertools.pairwise(points):
            for bs in range(a, b + 1):
                assert grid[bs, k] == pytest.approx(ya + (yb - ya) * (bs - a) / (b - a))
        lo, hi = points[0][0], points[-1][0]
        for bs in range(1, sizes[-1] + 1):
            held = (bs < lo and lo == sizes[0]) or (bs > hi and hi == sizes[-1])
            assert math.isnan(grid[bs, k]) == (not (lo <= bs <= hi or held))


# --- goodput_grid and best K ------------------------------------------------


def test_goodput_grid_is_acceptance_length_over_itl_in_seconds() -> None:
    spec = make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3)
    goodput = goodput_grid(spec)
    lengths = acceptance_lengths([0.8, 0.6, 0.4], 3)
    assert goodput[4, 2] == pytest.approx(lengths[2] / 0.007)
    assert goodput[1, 0] == pytest.approx(1 / 0.005)
    assert np.array_equal(np.isnan(goodput), np.isnan(itl_grid(spec)))


def test_goodput_grid_takes_an_acceptance_override() -> None:
    spec = make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3)
    live = goodput_grid(spec, per_position=[0.0, 0.0, 0.0])
    # With nothing accepted every K yields one token: goodput is 1/ITL for all K.
    assert live[16, 2] == pytest.approx(1 / 0.012)
    assert live[16, 1] < goodput_grid(spec)[16, 1]


def test_best_k_ties_go_to_the_smaller_k_and_nan_never_wins() -> None:
    goodput = np.array(
        [
            [np.nan, np.nan, np.nan],
            [100.0, 200.0, 200.0],
            [100.0, np.nan, 50.0],
            [np.nan, np.nan, np.nan],
        ]
    )
    best = best_k_per_batch_size(goodput)
    assert best.tolist() == [0, 1, 0, 0]


def test_best_k_respects_the_allowed_set() -> None:
    goodput = np.array([[np.nan] * 3, [1.0, 3.0, 2.0], [1.0, 2.0, 3.0]])
    assert best_k_per_batch_size(goodput, allowed=[0, 2]).tolist() == [0, 2, 2]
    assert best_k_per_batch_size(goodput, allowed=[0]).tolist() == [0, 0, 0]


def test_k_values_are_the_measured_ks() -> None:
    assert k_values(make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3)) == (0, 1, 2)


# --- derived schedules -------------------------------------------------------


def test_derive_schedule_of_a_hand_checked_profile() -> None:
    # AL(K) = 1.0, 1.8, 2.28. Goodput in tokens per ms:
    #   bs 1-3: K=0 1/5.0..1/5.4, K=1 1.8/5.2..1.8/6.0, K=2 unavailable (first
    #           measured at 4, which is not the profile's smallest batch size)
    #   bs 4:   K=1 1.8/6.4 = 0.281 < K=2 2.28/7.0 = 0.326
    #   K=1 and K=2 cross at bs = 4 + 12 * 1.992/3.072 = 11.8 (linear ITL in bs)
    #   bs 64:  K=0 1/12 = 0.083 < K=1 1.8/16 = 0.1125
    spec = make_spec(SPARSE, [0.8, 0.6, 0.4], max_k=3)
    assert derive_schedule(spec) == [(1, 3, 1), (4, 11, 2), (12, 64, 1)]
    assert format_schedule(derive_schedule(spec)) == "1-3:1 4-11:2 12-64:1"


def test_derive_schedule_of_the_example_falls_with_load() -> None:
    spec = load_profile(EXAMPLE).spec
    schedule = derive_schedule(spec)
    ks = [k for _, _, k in schedule]
    assert ks == sorted(ks, reverse=True)  # a dense model: best K falls with batch size
    assert ks[0] >= 4 and ks[-1] == 0
    assert schedule[-1][1] == 256


def test_derive_schedule_extends_to_max_batch_size() -> None:
    spec = load_profile(EXAMPLE).spec
    schedule = derive_schedule(spec, max_batch_size=1024)
    assert schedule[-1][1] == 1024 and schedule[-1][2] == 0


def test_a_derived_schedule_is_valid_and_the_rest_of_the_profile_kept() -> None:
    doc = load_profile(FIXTURES / "profile-small.yaml")
    derived = doc.with_schedule(derive_schedule(doc.spec))
    assert derived.spec.schedule == tuple(derive_schedule(doc.spec))
    assert derived.spec.measurements == doc.spec.measurements
    assert parse_profile(derived.to_document()) == derived


@given(profiles())
def test_derived_schedule_covers_one_to_max_contiguously_with_allowed_k(
    spec: ProfileSpec,
) -> None:
    schedule = derive_schedule(spec)
    max_bs = max(m.batch_size for m in spec.measurements)
    assert schedule[0][0] == 1
    assert schedule[-1][1] == max_bs
    for (_, hi, k), (lo, _, next_k) in itertools.pairwise(schedule):
        assert lo == hi + 1  # contiguous, no overlap
        assert k != next_k  # equal neighbours merged
    for lo, hi, k in schedule:
        assert lo <= hi
        assert 0 <= k <= spec.fingerprint.max_k
        assert k in k_values(spec)
    assert list(schedule_problems(schedule, max_k=spec.fingerprint.max_k)) == []


@given(profiles())
def test_derived_k_beats_every_fixed_k_at_every_measured_batch_size(spec: ProfileSpec) -> None:
    goodput = goodput_grid(spec)
    schedule = derive_schedule(spec)
    lookup = expand_lookup(to_vllm(schedule), spec.fingerprint.max_k, goodput.shape[0] - 1)
    for bs in sorted({m.batch_size for m in spec.measurements}):
        chosen = goodput[bs, lookup[bs]]
        assert not math.isnan(chosen)
        available = goodput[bs][~np.isnan(goodput[bs])]
        assert (chosen >= available).all()


# --- vLLM conversions ----------------------------------------------------------


@given(profiles())
def test_to_and_from_vllm_round_trip_derived_schedules(spec: ProfileSpec) -> None:
    schedule = derive_schedule(spec)
    table = to_vllm(schedule)
    assert all(type(v) is int for entry in table for v in entry)
    assert from_vllm(table, spec.fingerprint.max_k) == schedule


@given(profiles(), st.integers(1, 700))
def test_expand_lookup_gives_the_derived_best_k(spec: ProfileSpec, max_num_seqs: int) -> None:
    schedule = derive_schedule(spec)
    best = best_k_per_batch_size(goodput_grid(spec), allowed=k_values(spec))
    lookup = expand_lookup(to_vllm(schedule), spec.fingerprint.max_k, max_num_seqs)
    assert len(lookup) == max_num_seqs + 1 and lookup[0] == 0
    for bs in range(1, max_num_seqs + 1):
        assert lookup[bs] == best[min(bs, len(best) - 1)]  # the tail repeats the last K


@given(vllm_tables(), st.integers(1, 8), st.integers(1, 700))
def test_expand_lookup_matches_vllms_sequential_fill(
    table: list[list[int]], num_spec: int, max_bs: int
) -> None:
    assert expand_lookup(table, num_spec, max_bs) == vllm_reference_lookup(table, num_spec, max_bs)


@given(vllm_tables(), st.integers(1, 8), st.integers(1, 700))
def test_from_vllm_fills_gaps_clamps_and_expands_the_same(
    table: list[list[int]], num_spec: int, max_bs: int
) -> None:
    ours = from_vllm(table, num_spec)
    assert ours[0][0] == 1
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ours))
    assert all(0 <= k <= num_spec for _, _, k in ours)
    assert list(schedule_problems(ours, max_k=num_spec)) == []
    assert expand_lookup(to_vllm(ours), num_spec, max_bs) == expand_lookup(table, num_spec, max_bs)


def test_from_vllm_on_vllms_own_example() -> None:
    # The worked example in vLLM's tests: gaps 17-31 and 129-255 inherit.
    table = [[1, 16, 3], [32, 128, 2], [256, 2048, 0]]
    assert from_vllm(table, 3) == [(1, 31, 3), (32, 255, 2), (256, 2048, 0)]
    assert from_vllm(table, 2) == [(1, 255, 2), (256, 2048, 0)]  # clamped, then merged
    lookup = expand_lookup(table, 3, 300)
    assert lookup[0] == 0 and lookup[1] == 3 and lookup[31] == 3
    assert lookup[32] == 2 and lookup[255] == 2 and lookup[256] == 0 and lookup[300] == 0


def test_from_vllm_works_on_ranges_not_on_every_batch_size() -> None:
    huge = 1 << 40
    assert from_vllm([[1, 8, 7], [9, huge, 1]], 3) == [(1, 8, 3), (9, huge, 1)]


def test_expand_lookup_ignores_ranges_past_max_num_seqs() -> None:
    assert expand_lookup([[1, 4, 2], [5, 100, 1]], 3, 4) == [0, 2, 2, 2, 2]


@pytest.mark.parametrize(
    ("table", "num_spec", "max_bs", "match"),
    [
        ([[2, 8, 1]], 3, 8, "must start at batch size 1"),
        ([[1, 8, 1], [4, 9, 1]], 3, 8, "overlaps"),
        ([], 3, 8, "must not be empty"),
        ([[1, 8, -1]], 3, 8, "k must be >= 0"),
        ([[1, 8, 1]], 0, 8, "num_speculative_tokens"),
        ([[1, 8, 1]], 3, 0, "max_batch_size"),
    ],
)
def test_expand_lookup_refuses_what_vllm_refuses(
    table: list[list[int]], num_spec: int, max_bs: int, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        expand_lookup(table, num_spec, max_bs)


def test_from_vllm_accepts_unsorted_tables_like_vllm_but_reports_all_problems() -> None:
    assert from_vllm([[9, 20, 1], [1, 8, 2]], 3) == [(1, 8, 2), (9, 20, 1)]
    with pytest.raises(ScheduleError) as err:
        from_vllm([[0, 8, 1], [9, 4, -2]], 3)
    assert [p.split(":")[0] for p in err.value.problems] == ["[0]", "[1]", "[1]", "[0]"]
    assert "the first range must start at batch size 1" in err.value.problems[-1]


# --- schedule_problems: every rule, by name ----------------------------------------

RULES: list[tuple[str, Any, str]] = [
    ("not a list", {"1-16": 3}, ": must be a list"),
    ("empty", [], ": must not be empty"),
    ("entry too short", [[1, 16]], "[0]: must be [bsLo, bsHi, k]"),
    ("entry too long", [[1, 16, 3, 0]], "[0]: must be [bsLo, bsHi, k]"),
    ("entry not a sequence", [[1, 16, 3], 7], "[1]: must be [bsLo, bsHi, k]"),
    ("float entry", [[1, 16.0, 3]], "[0]: must be [bsLo, bsHi, k]"),
    ("bool entry", [[1, 16, True]], "[0]: must be [bsLo, bsHi, k]"),
    ("string entry", [[1, "16", 3]], "[0]: must be [bsLo, bsHi, k]"),
    ("batch size zero", [[0, 16, 3]], "[0]: batch sizes must be >= 1"),
    ("negative end", [[1, 16, 3], [17, -5, 1]], "[1]: batch sizes must be >= 1"),
    ("start after end", [[1, 16, 3], [40, 17, 1]], "[1]: range start 40 is after its end 17"),
    ("negative k", [[1, 16, -1]], "[0]: k must be >= 0"),
    ("k above maxK", [[1, 16, 6]], "[0]: k=6 exceeds maxK=5"),
    ("first range not at 1", [[2, 16, 3]], "[0]: the first range must start at batch size 1"),
    ("overlap", [[1, 16, 3], [16, 64, 1]], "[1]: range 16-64 overlaps the previous range 1-16"),
    ("unsorted", [[1, 16, 3], [65, 128, 1], [17, 64, 2]], "[2]: ranges must be sorted"),
]


@pytest.mark.parametrize(
    ("schedule", "expected"), [(s, e) for _, s, e in RULES], ids=[n for n, _, _ in RULES]
)
def test_schedule_problems_catches_each_rule(schedule: Any, expected: str) -> None:
    problems = list(schedule_problems(schedule, max_k=5))
    assert any(p.startswith(expected) for p in problems), problems


def test_schedule_problems_needs_max_k_of_at_least_one() -> None:
    problems = list(schedule_problems([[1, 16, 0]], max_k=0))
    assert problems == [": needs maxK >= 1 (vLLM's num_speculative_tokens must be > 0), got 0"]


@pytest.mark.parametrize(
    "schedule",
    [
        [[1, 16, 5], [17, 64, 3], [65, 128, 1], [129, 256, 0]],
        ((1, 1, 0),),
        [[1, 16, 3], [32, 128, 2], [256, 2048, 0]],  # gaps inherit in vLLM: allowed
    ],
)
def test_schedule_problems_accepts_valid_tables(schedule: Any) -> None:
    assert list(schedule_problems(schedule, max_k=5)) == []


def test_schedule_problems_are_prefixed_by_the_profile_validation() -> None:
    doc = load_profile(FIXTURES / "profile-small.yaml").to_document()
    doc["spec"]["schedule"] = [[1, 8, 2], [5, 64, 9]]
    with pytest.raises(ValueError) as err:
        parse_profile(doc)
    problems = err.value.args[0]
    assert "spec.schedule[1]: k=9 exceeds maxK=3" in problems
    assert "spec.schedule[1]: range 5-64 overlaps" in problems


def test_compress_merges_equal_neighbours_and_skips_index_zero() -> None:
    assert compress([9, 3, 3, 2, 2, 2, 0]) == [(1, 2, 3), (3, 5, 2), (6, 6, 0)]
    assert compress([0]) == []


def test_format_schedule() -> None:
    assert format_schedule([(1, 16, 5), (17, 64, 3)]) == "1-16:5 17-64:3"


@settings(max_examples=25)
@given(profiles())
def test_a_profile_with_its_derived_schedule_always_validates(spec: ProfileSpec) -> None:
    doc = parse_profile({"spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True)})
    derived = doc.with_schedule(derive_schedule(doc.spec))
    assert parse_profile(derived.to_document()).spec.schedule == tuple(derive_schedule(spec))
