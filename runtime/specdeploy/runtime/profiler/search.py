"""Which cells to measure: the exhaustive grid, or a smart search for the same table.

The table only needs, at each batch size, the K of highest goodput
(AL(K) / ITL). The exhaustive search measures every (batch size, K) cell.
The smart search measures what can change that answer:

* **K sweep with early stop.** At the smallest and largest batch sizes K is
  raised from 0 and stops once goodput has fallen below the best twice in a
  row: past its peak goodput keeps falling (each extra position is accepted
  with a lower probability and costs at least as much), and two falls
  rather than one keep a noisy cell from stopping the sweep early.
* **Bisection over batch sizes.** The middle batch size is always probed
  (a best K that rises then falls, as on MoE models, hides between equal
  ends). Then each interval whose two ends disagree on the best K is
  bisected until the batch size where it changes is pinned between
  neighbours; an interval whose ends agree is not measured inside: the
  schedule interpolates step times linearly between measured batch sizes,
  and a K that beats another at both ends of a linear segment beats it
  everywhere on it, so the derived schedule keeps that K there anyway.
* **Local probes.** Inside an interval the best K is sought around the
  neighbours' best K (their mean, rounded), moving up or down while goodput
  improves, so a probe measures K=0 and a handful of K, not all of them.

* **Explore once, settle the contenders.** While searching, each cell is
  measured with a single repeat (``explore``): most cells only show that
  they are not the best. Afterwards ``settle`` repeats the two leading K
  at each batch size until picking the leader can lose at most
  ``REGRET_TOLERANCE`` (a bounded regret, the budget split evenly between
  the two rather than spent on one), ``rebisect`` probes again wherever
  settling changed a best K so that neighbours now disagree, and
  ``verify`` measures any K the derived schedule picks only through
  interpolation, middle of the chord first. Repeated until nothing new is
  measured. On MoE models, whose best K changes at almost every batch
  size, this is where the saving is: nearly every size gets probed, so the
  cost is in repeats, not in cells.

After the search, ``finish`` measures the context axis (``measure_contexts``)
and, for the smart search, runs that settle / rebisect / verify loop
(``refine``) once more: the context cells re-fit the step-cost model the
schedule is derived with, and the re-fitted model can pick a K that was
never measured (or never settled) at that batch size.

K=0 is measured at every batch size the table covers: the profile requires
it. After the search, ``measure_baselines`` asks a backend that can
(``backend.MeasuresBaseline``) for plain decoding at every batch size that
fit: K=0 with speculation configured still pays for the drafter and the
table, so only that measurement says whether turning speculation off wins.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from enum import StrEnum

from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.profiler.backend import MeasuresBaseline, MeasuresContext
from specdeploy.runtime.profiler.document import provisional_spec
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure, is_out_of_memory
from specdeploy.runtime.profiler.grid import BatchTooLarge, Grid, Strategy
from specdeploy.runtime.profiler.sampling import CLOSE_CALL_REPEATS, CellStats
from specdeploy.runtime.schedule import REGRET_TOLERANCE as schedule_tolerance
from specdeploy.runtime.schedule import best_k_per_batch_size, goodput_grid, k_values


class SearchMode(StrEnum):
    EXHAUSTIVE = "exhaustive"
    SMART = "smart"


FALLS_TO_STOP = 2
"""Consecutive K below the best after which raising K stops."""


def exhaustive(grid: Grid, sizes: list[int]) -> None:
    """Every K at every batch size."""
    grid.planned = len(sizes) * (grid.max_k + 1)
    for bs in sizes:
        for k in range(grid.max_k + 1):
            grid.measure(bs, k)


def smart(grid: Grid, sizes: list[int]) -> None:
    """The pruned search of the module docstring."""
    n, full = len(sizes), grid.max_k + 1
    grid.planned = max(grid.planned, min(n * full, min(n, 2) * full + max(n - 2, 0) * 4))
    best: dict[int, int] = {}
    best[0] = sweep_up(grid, sizes[0])
    if len(sizes) == 1:
        return
    last = len(sizes) - 1
    best[last] = sweep_up(grid, sizes[last])
    _bisect(grid, sizes, best, 0, last, force=True)
    refine(grid, sizes)


def refine(grid: Grid, sizes: list[int]) -> None:
    """``settle``, ``rebisect`` and ``verify`` until a round measures no new cell.

    The smart search ends with it, and ``finish`` runs it again once the
    context axis is in: the context cells re-fit the step-cost model, which
    can make the derived schedule pick a K at a batch size where it was
    never measured (or never settled against the leader there).
    """
    for _ in range(len(sizes) * (grid.max_k + 1)):
        settle(grid)
        before = len(grid.cells)
        rebisect(grid, sizes)
        verify(grid, sizes)
        if len(grid.cells) == before:
            return


def finish(grid: Grid, mode: SearchMode, sizes: list[int], *, context_axis: bool = True) -> None:
    """After the search: the context axis (``measure_contexts``) and, for the smart
    search, ``refine`` again, so that the final table's leaders are measured and settled
    under the cost model the profile is built with (the exhaustive grid has every cell)."""
    if not context_axis:
        return
    measure_contexts(grid, sizes)
    if mode is SearchMode.SMART and sizes:
        refine(grid, sizes)


def rebisect(grid: Grid, sizes: list[int]) -> None:
    """Bisect again wherever neighbouring probed sizes now disagree on the best K.

    The first bisection decides on single repeats; ``settle`` may then swap
    the best K of a close call at an end, and an interval skipped because its
    ends agreed may hide a change of best K after all (its middle can even
    prefer a K neither end does). Cells already measured are free.
    """
    probed = [i for i, bs in enumerate(sizes) if (bs, 0) in grid.cells]
    best = {i: grid.best_k(sizes[i]) for i in probed}
    for i, j in itertools.pairwise(probed):
        if best[i] != best[j]:
            _bisect(grid, sizes, best, i, j, force=False)


def _bisect(
    grid: Grid, sizes: list[int], best: dict[int, int], i: int, j: int, force: bool
) -> None:
    """Probe between sizes[i] and sizes[j] while their best K differ (or ``force``)."""
    if j - i < 2:
        return
    if best[i] == best[j] and not force:
        grid.note(f"bs {sizes[i]}..{sizes[j]}: best K {best[i]} at both ends, not probed inside")
        return
    m = (i + j) // 2
    grid.planned = max(grid.planned, len(grid.cells) + 4)
    best[m] = probe(grid, sizes[m], hint=round((best[i] + best[j]) / 2))
    _bisect(grid, sizes, best, i, m, force=False)
    _bisect(grid, sizes, best, m, j, force=False)


def explore(grid: Grid, bs: int, k: int) -> None:
    """Measure a cell once (one repeat) unless it is measured already.

    The search only needs to know which K lead at each batch size; a cell
    that turns out not to be one of the two contenders decides nothing, so
    repeating it to a 1% interval is wasted. ``settle`` repeats the
    contenders, and only as far as their close call needs.
    """
    grid.measure(bs, k, at_most=1)


def sweep_up(grid: Grid, bs: int) -> int:
    """Raise K from 0 until goodput has fallen below the best twice; the best K."""
    explore(grid, bs, 0)
    best_k, best_g = 0, grid.goodput(bs, 0)
    falls = 0
    for k in range(1, grid.max_k + 1):
        explore(grid, bs, k)
        g = grid.goodput(bs, k)
        if g > best_g:
            best_k, best_g, falls = k, g, 0
            continue
        falls += 1
        if falls >= FALLS_TO_STOP:
            grid.note(f"bs {bs}: goodput fell twice after K={best_k}, stopped at K={k}")
            break
    return best_k


def probe(grid: Grid, bs: int, hint: int) -> int:
    """Best K near ``hint``: measure K=0 and ``hint``, then move while goodput improves."""
    hint = min(max(hint, 0), grid.max_k)
    explore(grid, bs, 0)
    if hint == 0:
        return sweep_up(grid, bs)
    explore(grid, bs, hint)
    best_k = hint if grid.goodput(bs, hint) > grid.goodput(bs, 0) else 0
    if best_k == 0:
        best_k = _walk(grid, bs, range(hint - 1, 0, -1), best_k)
        grid.note(f"bs {bs}: hint K={hint} lost to K=0; best K={best_k}")
        return best_k
    up = _walk(grid, bs, range(hint + 1, grid.max_k + 1), best_k)
    if up != best_k:
        return up
    return _walk(grid, bs, range(hint - 1, 0, -1), best_k)


def _walk(grid: Grid, bs: int, ks: Iterable[int], best_k: int) -> int:
    """Measure ``ks`` in order while each beats the best so far; the best K."""
    best_g = grid.goodput(bs, best_k)
    for k in ks:
        explore(grid, bs, k)
        g = grid.goodput(bs, k)
        if g <= best_g:
            break
        best_k, best_g = k, g
    return best_k


REGRET_TOLERANCE = schedule_tolerance
"""How much goodput a close call may plausibly lose (the issue's target is 1%); the
schedule's tie rule uses the same bound (``schedule.break_ties``)."""


def settle(grid: Grid) -> None:
    """Repeat the two best K at each batch size until picking the leader is safe.

    Only the contenders decide the table. While their intervals overlap
    around a gap of at least ``REGRET_TOLERANCE``, each is repeated in turn
    (interleaved, so a slow drift of the machine hits both) up to
    ``CLOSE_CALL_REPEATS``. Then picking the leader can lose at
    most ``z * sqrt(se1^2 + se2^2) - gap`` (the upper bound of the
    runner-up's advantage, relative; each se carries the step time's and the
    acceptance length's error): while that exceeds ``REGRET_TOLERANCE`` the
    less precise contender is repeated, sized to close the difference, up
    to ``max_repeats``. Clear winners (gap well beyond the noise) cost
    nothing. Whenever the leader changes, its neighbours K-1 and K+1 are
    measured if they are not yet: the search reached the old leader from
    its own side, and the new one's other side was never looked at.
    """
    for bs in sorted({bs for bs, _ in grid.cells}):
        leader = -1
        while True:
            best = grid.best_k(bs)
            if best != leader:
                if leader >= 0:
                    grid.note(f"bs {bs}: the leader moved from K={leader} to K={best}")
                leader = best
                if _probe_neighbours(grid, bs, best):
                    continue
            target = _settle_target(grid, bs)
            if target is None:
                break
            k, rel_ci = target
            grid.repeat(bs, k, rel_ci)


def _probe_neighbours(grid: Grid, bs: int, k: int) -> bool:
    """Measure K-1 and K+1 at ``bs`` where unmeasured; True when it measured any."""
    missing = [n for n in (k - 1, k + 1) if 0 <= n <= grid.max_k and (bs, n) not in grid.cells]
    for n in missing:
        grid.note(f"bs {bs}: measuring K={n}, a neighbour of the leader K={k}")
        explore(grid, bs, n)
    return bool(missing)


def relative_se(grid: Grid, bs: int, k: int) -> float:
    """Relative standard error of a cell's goodput: step time and acceptance length."""
    stats = grid.cells[(bs, k)]
    z = grid.sampling.z
    al = float(acceptance_lengths(grid.per_position(), grid.max_k)[k])
    return math.hypot(stats.relative_half_width(z) / z, grid.acceptance_length_sd(k) / al)


def _settle_target(grid: Grid, bs: int) -> tuple[int, float] | None:
    """(K to repeat, its interval target) while the close call at ``bs`` is open."""
    ks = sorted(grid.measured_ks(bs), key=lambda k: -grid.goodput(bs, k))
    if len(ks) < 2:
        return None
    z = grid.sampling.z
    lead, runner = grid.cells[(bs, ks[0])], grid.cells[(bs, ks[1])]
    gap = 1.0 - grid.goodput(bs, ks[1]) / grid.goodput(bs, ks[0])
    open_cells = [c for c in (lead, runner) if c.repeats < grid.sampling.max_repeats]
    se = {c.k: relative_se(grid, bs, c.k) for c in (lead, runner)}
    spread = z * math.hypot(*se.values())
    single = [c for c in open_cells if c.repeats < 2]
    if single and gap < 2 * REGRET_TOLERANCE:
        # One repeat's mean can be off by more than its spread says (one bad
        # run); a second exposes it through the between-repeat term.
        return single[0].k, grid.sampling.rel_ci
    few = [c for c in open_cells if c.repeats < CLOSE_CALL_REPEATS]
    if few and REGRET_TOLERANCE <= gap < spread:
        # Overlapping intervals around a gap worth having: the contender with
        # fewer repeats goes next. Below the tolerance either choice loses
        # less than it, and the schedule's tie rule takes the smaller K.
        return min(few, key=lambda c: (c.repeats, c.k)).k, grid.sampling.rel_ci
    if spread - gap <= REGRET_TOLERANCE:
        return _tie_target(grid, bs, lead)
    if not open_cells:
        return _tie_target(grid, bs, lead)
    wider = max(open_cells, key=lambda c: se[c.k])
    other = se[runner.k if wider is lead else lead.k]
    budget = (REGRET_TOLERANCE + gap) / z
    # Its share of the budget: what the other leaves, but never below an even
    # split. Asking one cell for all of it when the other is nearly at the
    # budget alone costs many times the samples of tightening both evenly
    # (cost ~ 1/se^2); the other is repeated on the next turn if needed.
    se_target = max(math.sqrt(max(budget**2 - other**2, 0.0)), budget / math.sqrt(2))
    return wider.k, max(z * se_target, 1e-4)


def _tie_target(grid: Grid, bs: int, lead: CellStats) -> tuple[int, float] | None:
    """A smaller K the schedule's tie rule would pick over the leader on its interval
    alone (``schedule.break_ties``): repeat the wider of the two, so that a cell
    explored once is not a tie merely because one repeat says little."""
    g_lead = grid.goodput(bs, lead.k)
    for k in grid.measured_ks(bs):
        if k >= lead.k:
            break
        cell = grid.cells[(bs, k)]
        g = grid.goodput(bs, k)
        width = math.hypot(
            g_lead * lead.relative_half_width(grid.sampling.z),
            g * cell.relative_half_width(grid.sampling.z),
        )
        if g_lead - g < width - REGRET_TOLERANCE * g_lead:
            open_cells = [c for c in (lead, cell) if c.repeats < grid.sampling.max_repeats]
            if not open_cells:
                return None
            wider = max(open_cells, key=lambda c: c.relative_half_width(grid.sampling.z))
            return wider.k, grid.sampling.rel_ci
    return None


def verify(grid: Grid, sizes: list[int]) -> bool:
    """Measure every cell the derived schedule relies on but only interpolates.

    The schedule interpolates a K's step time between the batch sizes where
    that K was measured, across any batch size where it was not; over a wide
    gap that chord can be far from the truth (MoE step time is concave in
    batch size) and make an unmeasured K look best. So: derive the schedule
    from the grid as it stands, and wherever it picks a K that is not
    measured at that batch size (or, for a batch size not probed, at the
    probed sizes around it), measure that cell; repeat until it only picks
    measured K. True when it measured anything.
    """
    measured = False
    for _ in range(len(sizes) * (grid.max_k + 1)):
        missing = _unmeasured_choices(grid, sizes)
        if not missing:
            break
        for bs, k in _middles(missing):
            grid.note(f"bs {bs}: schedule picked unmeasured K={k}, measuring it")
            explore(grid, bs, k)
            measured = True
    return measured


def _middles(missing: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Per K, the middle one of the batch sizes where it is missing.

    A K picked at several batch sizes is usually picked through one long
    chord between two distant measurements; measuring it in the middle
    splits that chord and often shows it never was the best, so the others
    are re-derived before being measured (a bisection, not a sweep).
    """
    by_k: dict[int, list[int]] = {}
    for bs, k in missing:
        by_k.setdefault(k, []).append(bs)
    return [(sorted(sizes)[len(sizes) // 2], k) for k, sizes in sorted(by_k.items())]


def _unmeasured_choices(grid: Grid, sizes: list[int]) -> list[tuple[int, int]]:
    spec = provisional_spec(grid)
    best = best_k_per_batch_size(goodput_grid(spec), allowed=k_values(spec))
    probed = sorted({bs for bs, k in grid.cells if k == 0})
    missing: list[tuple[int, int]] = []
    for bs in sizes:
        if bs >= len(best):
            continue
        k = int(best[bs])
        for around in _bracket(probed, bs):
            if (around, k) not in grid.cells and (around, k) not in missing:
                missing.append((around, k))
    return missing


def _bracket(probed: list[int], bs: int) -> list[int]:
    """``bs`` itself when probed, else the probed sizes on either side of it."""
    if bs in probed:
        return [bs]
    below = [p for p in probed if p < bs][-1:]
    above = [p for p in probed if p > bs][:1]
    return below + above


STRATEGIES: dict[SearchMode, Strategy] = {
    SearchMode.EXHAUSTIVE: exhaustive,
    SearchMode.SMART: smart,
}


def measure_baselines(grid: Grid, sizes: Iterable[int]) -> list[int]:
    """Plain decoding at each of ``sizes`` where the backend can run it; the sizes measured.

    Asked after the search because a backend may release its speculative
    engine to start a plain one. An out-of-memory failure drops that size
    and every larger one (plain decoding needs less memory than what fit,
    so it means the machine changed), noted in the grid's log.
    """
    measured: list[int] = []
    ordered = sorted(set(sizes))
    if isinstance(grid.backend, MeasuresBaseline):
        grid.plan_more(len(ordered))
    for bs in ordered:
        try:
            if grid.measure_baseline(bs) is None:
                grid.note("the backend measures no plain-decoding baseline")
                return measured
        except DeterministicFailure as err:
            if not is_out_of_memory(err):
                raise
            grid.note(
                f"baseline at batch size {bs} does not fit: {err.reason}; larger ones skipped"
            )
            return measured
        measured.append(bs)
    return measured


CONTEXT_FACTORS = (0.25, 4.0)
"""Contexts of the context axis, as multiples of the backend's ordinary prompt: with the
ordinary cells that is three contexts 16x apart, well past the cost model's minimum spread
(``cost.MIN_CONTEXT_SPREAD``)."""


def measure_contexts(
    grid: Grid, sizes: Iterable[int], factors: Sequence[float] = CONTEXT_FACTORS
) -> list[tuple[int, int, int]]:
    """The context axis: the best K of the smallest, middle and largest batch size at
    ``factors`` times the ordinary prompt length; the (batch size, K, prompt) measured.

    A context that does not fit (out of memory) is skipped and noted; a backend
    that cannot set the context measures none (noted).
    """
    backend = grid.backend
    if not isinstance(backend, MeasuresContext):
        grid.note("the backend cannot set a cell's context: no context axis")
        return []
    fitted = sorted(bs for bs in set(sizes) if grid.measured_ks(bs))
    if not fitted:
        return []
    base = backend.default_prompt_tokens()
    picks = sorted({fitted[0], fitted[len(fitted) // 2], fitted[-1]})
    grid.plan_more(len(picks) * len(factors))
    measured: list[tuple[int, int, int]] = []
    for bs in picks:
        k = grid.best_k(bs)
        for factor in factors:
            prompt = max(16, round(base * factor))
            try:
                grid.measure_at_context(bs, k, prompt)
            except DeterministicFailure as err:
                if not is_out_of_memory(err):
                    raise
                grid.note(f"context {prompt} at batch size {bs} does not fit: {err.reason}")
                continue
            measured.append((bs, k, prompt))
    grid.note("context axis: " + ", ".join(f"bs {b} K={k} at {p} tokens" for b, k, p in measured))
    return measured


def run_search(grid: Grid, mode: SearchMode, sizes: Iterable[int]) -> list[int]:
    """Run ``mode`` over ``sizes``; the batch sizes that fit (OOM drops the larger ones).

    An out-of-memory failure above the smallest batch size drops that size
    and every larger one and starts the search again on the rest; cells
    already measured are kept, so the restart costs no measurement.
    """
    remaining = sorted(set(sizes))
    while True:
        try:
            STRATEGIES[mode](grid, remaining)
            return remaining
        except BatchTooLarge as err:
            grid.drop_sizes_from(err.batch_size)
            remaining = [bs for bs in remaining if bs < err.batch_size]
