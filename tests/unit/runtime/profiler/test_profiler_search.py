"""The searches: what they measure, when they stop, and the table they lead to."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.profile import Fingerprint, Source
from specdeploy.runtime.profiler.backend import CellSample
from specdeploy.runtime.profiler.document import build_profile
from specdeploy.runtime.profiler.exit_codes import ExitCode, model_not_found, out_of_memory
from specdeploy.runtime.profiler.grid import Grid
from specdeploy.runtime.profiler.sampling import Sampling
from specdeploy.runtime.profiler.search import (
    REGRET_TOLERANCE,
    SearchMode,
    _middles,
    _settle_target,
    rebisect,
    run_search,
    settle,
    sweep_up,
)
from specdeploy.runtime.profiler.sim_backend import SimBackend
from specdeploy.runtime.schedule import best_k_per_batch_size, goodput_grid, k_values
from specdeploy.runtime.sim.presets import get_preset

SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
RATES = (0.8, 0.7, 0.6, 0.5, 0.4)
ONE_REPEAT = Sampling(steps=4, min_repeats=1, max_repeats=1)


class TableBackend:
    """Noise-free step times from a formula; draft counts exactly matching ``RATES``."""

    name = "table"
    source = Source.MODELLED

    def __init__(self, itl_s: Callable[[int, int], float], max_bs: int = 1 << 20) -> None:
        self.itl_s = itl_s
        self.max_bs = max_bs
        self.calls: list[tuple[int, int]] = []

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(model="m", method="eagle", gpu_type="g", max_k=len(RATES))

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        if batch_size > self.max_bs:
            raise out_of_memory(f"batch {batch_size} does not fit")
        self.calls.append((batch_size, k))
        drafted, accepted, alive = [], [], 1_000_000
        for rate in RATES[:k]:
            drafted.append(alive)
            alive = round(alive * rate)
            accepted.append(alive)
        return CellSample(batch_size, k, [self.itl_s(batch_size, k)] * steps, drafted, accepted)

    def close(self) -> None:
        return None


def _dense_itl(bs: int, k: int) -> float:
    """Memory-bound until ~64 tokens per step, then compute-bound: best K falls with bs."""
    return 0.010 + 0.0004 * k + 0.00005 * max(0, bs * (k + 1) - 64)


def _grid(backend: TableBackend, sampling: Sampling = ONE_REPEAT) -> Grid:
    return Grid(backend, sampling, max_k=len(RATES), smallest_batch_size=1)


def test_exhaustive_measures_every_cell_once() -> None:
    backend = TableBackend(_dense_itl)
    grid = _grid(backend)
    assert run_search(grid, SearchMode.EXHAUSTIVE, [4, 1, 2]) == [1, 2, 4]
    assert sorted(backend.calls) == [(bs, k) for bs in (1, 2, 4) for k in range(6)]


def test_sweep_stops_raising_k_after_goodput_fell_twice() -> None:
    # Goodput peaks at K=1 when each extra K costs a lot: measure 0, 1, then 2 and 3 fall.
    backend = TableBackend(lambda bs, k: 0.010 + 0.006 * k)
    grid = _grid(backend)
    assert sweep_up(grid, 1) == 1
    assert backend.calls == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert any("fell twice" in line for line in grid.log)


def test_sweep_goes_to_max_k_while_goodput_keeps_rising() -> None:
    backend = TableBackend(lambda bs, k: 0.010)
    assert sweep_up(_grid(backend), 1) == len(RATES)
    assert [k for _, k in backend.calls] == list(range(len(RATES) + 1))


def test_bisection_skips_the_inside_of_an_interval_whose_ends_agree() -> None:
    # The same best K (2) everywhere: ends and middle probed, nothing else.
    backend = TableBackend(lambda bs, k: 0.010 * (1 + 0.001 * bs) + 0.004 * k)
    grid = _grid(backend)
    run_search(grid, SearchMode.SMART, SIZES)
    assert {bs for bs, _ in grid.cells} == {1, 16, 256}
    assert sum("not probed inside" in line for line in grid.log) == 2


def test_smart_search_measures_fewer_cells_and_keeps_k0_everywhere() -> None:
    backend = TableBackend(_dense_itl)
    grid = _grid(backend)
    run_search(grid, SearchMode.SMART, SIZES)
    assert len(grid.cells) < len(SIZES) * (len(RATES) + 1)
    probed = {bs for bs, _ in grid.cells}
    assert all((bs, 0) in grid.cells for bs in probed)
    assert len(backend.calls) == len(set(backend.calls))  # never a cell twice


def test_smart_table_picks_the_exhaustive_best_k_on_a_noise_free_model() -> None:
    tables = {}
    for mode in SearchMode:
        grid = _grid(TableBackend(_dense_itl))
        run_search(grid, mode, SIZES)
        tables[mode] = build_profile(
            grid,
            fingerprint=TableBackend(_dense_itl).fingerprint(),
            source=Source.MODELLED,
            dataset="x",
        )
    truth = goodput_grid(tables[SearchMode.EXHAUSTIVE].spec)
    best_ex = best_k_per_batch_size(truth, k_values(tables[SearchMode.EXHAUSTIVE].spec))
    smart = tables[SearchMode.SMART].spec
    best_sm = best_k_per_batch_size(goodput_grid(smart, 256), k_values(smart))
    assert [int(best_sm[bs]) for bs in SIZES] == [int(best_ex[bs]) for bs in SIZES]
    assert len(set(best_ex[1:].tolist())) >= 3  # the model does move the best K


def test_out_of_memory_above_the_smallest_batch_drops_the_larger_ones() -> None:
    backend = TableBackend(_dense_itl, max_bs=40)
    grid = _grid(backend)
    assert run_search(grid, SearchMode.SMART, SIZES) == [1, 2, 4, 8, 16, 32]
    assert grid.dropped_from == 64
    assert max(bs for bs, _ in grid.cells) <= 32
    assert (32, 0) in grid.cells  # the new largest size was probed


def test_out_of_memory_at_the_smallest_batch_is_fatal() -> None:
    grid = _grid(TableBackend(_dense_itl, max_bs=0))
    with pytest.raises(Exception) as info:
        run_search(grid, SearchMode.SMART, SIZES)
    assert getattr(info.value, "exit_code", None) == ExitCode.OUT_OF_MEMORY


def test_other_deterministic_failures_pass_through() -> None:
    class Missing(TableBackend):
        def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
            raise model_not_found("no such model")

    with pytest.raises(Exception) as info:
        run_search(_grid(Missing(_dense_itl)), SearchMode.EXHAUSTIVE, [1, 2])
    assert getattr(info.value, "exit_code", None) == ExitCode.MODEL_NOT_FOUND


class NoisyBackend(TableBackend):
    """Step times with a fixed relative spread (alternating +-spread), for the stopping rules."""

    def __init__(self, itl_s: Callable[[int, int], float], spread: float) -> None:
        super().__init__(itl_s)
        self.spread = spread
        self.steps_asked: list[int] = []

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        sample = super().measure(batch_size, k, steps)
        self.steps_asked.append(steps)
        base = self.itl_s(batch_size, k)
        times = [base * (1 + self.spread * (-1) ** i) for i in range(steps)]
        return CellSample(batch_size, k, times, sample.drafted, sample.accepted)


def test_a_clearly_losing_cell_stops_repeating_before_its_interval_is_narrow() -> None:
    # 10% step spread: a 1% interval needs ~400 steps; K=5 at 3x the step time
    # loses to K=0 by far, so it stops after its first repeat.
    backend = NoisyBackend(lambda bs, k: 0.010 * (1 + 2 * (k == 5)), spread=0.10)
    grid = Grid(backend, Sampling(steps=16, max_repeats=4), max_k=5, smallest_batch_size=1)
    grid.measure(1, 0)
    assert grid.cells[(1, 0)].repeats == 4  # no rival: only max_repeats stops it
    assert grid.measure(1, 5).repeats == 1


def test_settle_repeats_the_two_contenders_of_a_close_call_only() -> None:
    # K=3 and K=4 within 0.2% of each other; K=0 far behind; 2% step spread.
    al = acceptance_lengths(RATES, len(RATES))
    goodput = {0: 100.0, 3: 180.0, 4: 180.3, 5: 150.0}
    backend = NoisyBackend(lambda bs, k: float(al[k]) / goodput[k], spread=0.02)
    grid = Grid(backend, Sampling(steps=16), max_k=5, smallest_batch_size=1)
    for k in (0, 3, 4):
        grid.measure(1, k)
    before = {k: grid.cells[(1, k)].samples for k in (0, 3, 4)}
    settle(grid)
    after = {k: grid.cells[(1, k)].samples for k in (0, 3, 4)}
    assert after[0] == before[0]
    assert after[3] > before[3] and after[4] > before[4]
    assert all(grid.cells[(1, k)].repeats >= 2 for k in (3, 4))
    # the leader's unmeasured neighbour (K=5) is measured once, not repeated
    assert grid.cells[(1, 5)].repeats == 1


# --- on the simulator ----------------------------------------------------------


def _sim_profile(preset: str, mode: SearchMode) -> tuple[Grid, SimBackend]:
    p = get_preset(preset)
    backend = SimBackend(p, seed=3)
    min_repeats = 5 if mode is SearchMode.EXHAUSTIVE else 1
    grid = Grid(backend, Sampling(min_repeats=min_repeats), max_k=p.max_k, smallest_batch_size=1)
    run_search(grid, mode, SIZES)
    return grid, backend


@pytest.mark.parametrize("preset", ["seed-dense", "seed-moe"])
def test_smart_search_costs_less_and_loses_under_one_percent_goodput(preset: str) -> None:
    ex_grid, ex_backend = _sim_profile(preset, SearchMode.EXHAUSTIVE)
    sm_grid, sm_backend = _sim_profile(preset, SearchMode.SMART)
    assert len(sm_grid.cells) < len(ex_grid.cells)
    assert sm_backend.spent_seconds < 0.35 * ex_backend.spent_seconds
    fp = get_preset(preset).fingerprint()
    ex = build_profile(ex_grid, fingerprint=fp, source=Source.MODELLED, dataset="mt-bench")
    sm = build_profile(sm_grid, fingerprint=fp, source=Source.MODELLED, dataset="mt-bench")
    truth = goodput_grid(ex.spec)
    best_ex = best_k_per_batch_size(truth, k_values(ex.spec))
    best_sm = best_k_per_batch_size(goodput_grid(sm.spec, 256), k_values(sm.spec))
    loss = [1 - truth[bs, best_sm[bs]] / truth[bs, best_ex[bs]] for bs in SIZES]
    assert max(loss) <= 0.01, dict(zip(SIZES, np.round(loss, 4), strict=True))


def test_smart_search_repeats_only_the_contenders_of_each_batch_size() -> None:
    # 10% step spread: a 1% interval needs hundreds of steps. Exploring
    # measures each cell once; only the two leading K at a batch size are
    # repeated (by settle), and a smaller K the schedule's tie rule would
    # otherwise take on one repeat's wide interval; the rest keep one repeat.
    backend = NoisyBackend(_dense_itl, spread=0.10)
    grid = Grid(backend, Sampling(steps=16), max_k=len(RATES), smallest_batch_size=1)
    run_search(grid, SearchMode.SMART, SIZES)
    for bs in {bs for bs, _ in grid.cells}:
        ranked = sorted(grid.measured_ks(bs), key=lambda k: -grid.goodput(bs, k))
        others = [k for k in ranked[2:] if k > ranked[0]]
        assert all(grid.cells[(bs, k)].repeats == 1 for k in others), bs


def test_verify_measures_the_middle_of_a_chord_first() -> None:
    missing = [(4, 1), (16, 1), (64, 1), (8, 2), (128, 1)]
    assert _middles(missing) == [(64, 1), (8, 2)]


def test_rebisect_probes_between_probed_sizes_that_now_disagree() -> None:
    backend = TableBackend(_dense_itl)
    grid = _grid(backend)
    assert sweep_up(grid, 1) != sweep_up(grid, 16)
    rebisect(grid, SIZES[:5])
    assert (4, 0) in grid.cells  # the middle of 1..16 was probed
    assert {bs for bs, _ in grid.cells} <= {1, 2, 4, 8, 16}


def test_settle_asks_a_contender_for_no_less_than_an_even_share_of_the_budget() -> None:
    # Both contenders already near the regret budget: the wider one is asked
    # for half of it (in variance), not for what little the other leaves.
    al = acceptance_lengths(RATES, len(RATES))
    goodput = {0: 100.0, 3: 180.0, 4: 180.3}
    backend = NoisyBackend(lambda bs, k: float(al[k]) / goodput[k], spread=0.02)
    sampling = Sampling(steps=16, min_repeats=2, rel_ci=0.05)
    grid = Grid(backend, sampling, max_k=5, smallest_batch_size=1)
    for k in (0, 3, 4):
        grid.measure(1, k)
    target = _settle_target(grid, 1)
    assert target is not None
    gap = 1.0 - grid.goodput(1, 3) / grid.goodput(1, 4)
    assert target[1] >= (REGRET_TOLERANCE + gap) / math.sqrt(2) - 1e-12


def test_finish_verifies_the_smart_search_again_under_the_context_axis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The context cells re-fit the step-cost model the schedule is derived with, so
    ``finish`` runs ``verify`` (through ``refine``) after them: every K the final
    table picks at a probed size is measured there. No sim preset and seed scanned
    (3% jitter, the bench's AR(1) noise, context cells skewed 0.5-4x) made the
    re-fitted model pick an unmeasured K, so the order is checked directly."""
    from specdeploy.runtime.profiler import search

    preset = get_preset("seed-moe")
    grid = Grid(
        SimBackend(preset, seed=3),
        Sampling(min_repeats=1),
        max_k=preset.max_k,
        smallest_batch_size=1,
    )
    sizes = run_search(grid, SearchMode.SMART, SIZES)
    seen: list[int] = []
    real_verify = search.verify

    def recording_verify(g: Grid, s: list[int]) -> bool:
        seen.append(len(g.contexts))
        return real_verify(g, s)

    monkeypatch.setattr(search, "verify", recording_verify)
    search.finish(grid, SearchMode.SMART, sizes)
    assert grid.contexts and seen and seen[-1] == len(grid.contexts)
    spec = build_profile(
        grid, fingerprint=grid.backend.fingerprint(), source=grid.backend.source, dataset="x"
    ).spec
    picked = best_k_per_batch_size(goodput_grid(spec), allowed=k_values(spec))
    probed = {bs for bs, k in grid.cells if k == 0}
    assert all((bs, int(picked[bs])) in grid.cells for bs in probed if bs < len(picked))
    # the exhaustive grid has every cell: nothing to verify, only the context axis
    seen.clear()
    full = Grid(
        SimBackend(preset, seed=3),
        Sampling(min_repeats=1),
        max_k=preset.max_k,
        smallest_batch_size=1,
    )
    search.finish(full, SearchMode.EXHAUSTIVE, run_search(full, SearchMode.EXHAUSTIVE, SIZES))
    assert full.contexts and not seen
