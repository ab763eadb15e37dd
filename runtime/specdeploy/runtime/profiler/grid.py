"""The measured grid: cells measured so far, pooled acceptance, and the goodput they imply.

Both searches drive the backend through ``Grid.measure``, which repeats a
cell until ``Sampling`` says it is stable, never measures a cell twice, and
tells the progress observer. Acceptance is pooled over every cell: it
depends on the workload, not on the batch size (DESIGN.md, "The math"), so
every cell's counts sharpen the same per-position rates: a_i =
accepted/reached (a position the drafter did not propose counts as
reached and rejected), the drafting rate q_i = proposed/reached, and the
proposal survival s_i = offered/scheduled that prices verified tokens
(``pooled_counts``).

``Grid.measure_baseline`` measures plain decoding (no speculation
configured) at a batch size, where the backend can (``MeasuresBaseline``).

An out-of-memory failure above the smallest batch size is not fatal: that
batch size does not fit, so neither does any larger one (``BatchTooLarge``
lets the search drop them). At the smallest batch size it is: nothing fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Protocol

from specdeploy.runtime.goodput import DraftCounts, acceptance_lengths
from specdeploy.runtime.profiler.backend import (
    CellSample,
    MeasuresBaseline,
    MeasuresContext,
    ProfilerBackend,
)
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure, is_out_of_memory
from specdeploy.runtime.profiler.sampling import CellStats, Sampling

Cell = tuple[int, int]
"""(batch size, K)."""


class BatchTooLarge(Exception):
    """Out of memory at a batch size above the smallest one."""

    def __init__(self, batch_size: int, reason: str) -> None:
        super().__init__(f"batch size {batch_size} does not fit: {reason}")
        self.batch_size = batch_size
        self.reason = reason


class Observer(Protocol):
    """Told about each cell (progress display, logs)."""

    def cell_started(self, batch_size: int, k: int) -> None: ...

    def cell_done(self, stats: CellStats, *, done: int, planned: int, what: str = "") -> None: ...


class Grid:
    """Measured cells keyed by (batch size, K), and what they say about goodput."""

    def __init__(
        self,
        backend: ProfilerBackend,
        sampling: Sampling,
        *,
        max_k: int,
        smallest_batch_size: int,
        observer: Observer | None = None,
    ) -> None:
        self.backend = backend
        self.sampling = sampling
        self.max_k = max_k
        self.smallest_batch_size = smallest_batch_size
        self.observer = observer
        self.cells: dict[Cell, CellStats] = {}
        self.planned = 0
        """The search's current estimate of how many cells it will measure."""
        self.calls = 0
        self.log: list[str] = []
        self.dropped_from: int | None = None
        self.baselines: dict[int, CellStats] = {}
        """Plain decoding per batch size (``measure_baseline``)."""
        self.contexts: dict[tuple[int, int, int], CellStats] = {}
        """Cells at other contexts, keyed (batch size, K, prompt tokens): the cost model's
        context axis (``measure_at_context``)."""

    # --- measuring ---------------------------------------------------------

    def measure(self, batch_size: int, k: int, *, at_most: int | None = None) -> CellStats:
        """The cell's stats, measured to stability the first time it is asked for.

        ``at_most`` caps the repeats of that first measurement: a search that
        explores many cells and then repeats only the contenders of each
        close call (``search.settle``) need not make every cell precise.
        """
        known = self.cells.get((batch_size, k))
        if known is not None:
            return known
        if not 0 <= k <= self.max_k:
            raise ValueError(f"k={k} outside 0..maxK={self.max_k}")
        if self.observer is not None:
            self.observer.cell_started(batch_size, k)
        stats = CellStats(batch_size, k)
        while not (
            stats.stable(self.sampling)
            or self._clearly_loses(stats)
            or (at_most is not None and stats.repeats >= at_most)
        ):
            stats.add(self._one_repeat(batch_size, k, self.sampling.steps_for(stats)))
        self.cells[(batch_size, k)] = stats
        self._report(stats)
        return stats

    def measured_count(self) -> int:
        """Every measurement so far: cells, baselines and context cells."""
        return len(self.cells) + len(self.baselines) + len(self.contexts)

    def plan_more(self, count: int) -> None:
        """Tell progress that ``count`` more measurements follow (baselines, contexts)."""
        self.planned = max(self.planned, self.measured_count()) + count

    def _report(self, stats: CellStats, what: str = "") -> None:
        self.planned = max(self.planned, self.measured_count())
        if self.observer is not None:
            self.observer.cell_done(
                stats, done=self.measured_count(), planned=self.planned, what=what
            )

    def repeat(self, batch_size: int, k: int, rel_ci: float) -> CellStats:
        """One more repeat of a measured cell, sized to reach ``rel_ci`` (a close call)."""
        stats = self.cells[(batch_size, k)]
        stats.add(self._one_repeat(batch_size, k, self.sampling.steps_for(stats, rel_ci)))
        self._report(stats, f"K={k} repeat {stats.repeats}")
        return stats

    def measure_baseline(self, batch_size: int) -> CellStats | None:
        """Plain decoding at ``batch_size``, repeated to stability; None when the backend
        cannot run it. Measured once per batch size, like a cell."""
        known = self.baselines.get(batch_size)
        if known is not None:
            return known
        backend = self.backend
        if not isinstance(backend, MeasuresBaseline):
            return None
        stats = CellStats(batch_size, 0)
        while not stats.stable(self.sampling):
            steps = self.sampling.steps_for(stats)
            stats.add(backend.measure_baseline(batch_size, steps))
            self.calls += 1
        self.baselines[batch_size] = stats
        self._report(stats, "plain decoding")
        return stats

    def measure_at_context(self, batch_size: int, k: int, prompt_tokens: int) -> CellStats | None:
        """A cell at a ``prompt_tokens`` context, repeated to stability; None when the
        backend cannot set the context. These cells price context only: the pooled
        acceptance and the search's choices come from the ordinary cells."""
        key = (batch_size, k, prompt_tokens)
        known = self.contexts.get(key)
        if known is not None:
            return known
        backend = self.backend
        if not isinstance(backend, MeasuresContext):
            return None
        stats = CellStats(batch_size, k)
        while not stats.stable(self.sampling):
            steps = self.sampling.steps_for(stats)
            stats.add(backend.measure_at_context(batch_size, k, steps, prompt_tokens))
            self.calls += 1
        self.contexts[key] = stats
        self._report(stats, f"K={k} at {prompt_tokens}-token prompts")
        return stats

    def goodput_bounds(self, batch_size: int, k: int) -> tuple[float, float]:
        """95% bounds of the cell's goodput: its step time's interval and the pooled
        acceptance length's, taken together (the lower bound pairs the shorter
        acceptance length with the longer step)."""
        stats = self.cells[(batch_size, k)]
        al = float(acceptance_lengths(self.per_position(), self.max_k)[k])
        spread = self.sampling.z * self.acceptance_length_sd(k)
        hw = stats.half_width(self.sampling.z)
        low = max(al - spread, 1.0) / (stats.mean_seconds + hw)
        return low, (al + spread) / max(stats.mean_seconds - hw, 1e-12)

    def acceptance_dispersion(self) -> float:
        """How many times the binomial variance acceptance varies by (>= 1).

        Sequence-steps of one prompt are not independent draws: a prompt that
        repeats itself drafts and accepts throughout. Pearson's chi-square of
        the repeats' position-1 counts around the pooled rate, per degree of
        freedom, measures that over-dispersion (1.0 with fewer than 2 repeats
        or no spread).
        """
        repeats = [r for s in self.cells.values() for r in s.repeat_first if r[0] > 0]
        reached = sum(r for r, _ in repeats)
        if len(repeats) < 2 or reached == 0:
            return 1.0
        rate = sum(a for _, a in repeats) / reached
        if not 0.0 < rate < 1.0:
            return 1.0
        chi2 = sum((a - n * rate) ** 2 / (n * rate * (1.0 - rate)) for n, a in repeats)
        return max(chi2 / (len(repeats) - 1), 1.0)

    def acceptance_length_sd(self, k: int) -> float:
        """Standard error of the pooled acceptance length at ``k`` (delta method over
        the per-position rates, binomial variance times ``acceptance_dispersion``)."""
        if k <= 0:
            return 0.0
        reached, accepted = self.draft_counts()
        rates = [accepted[i] / reached[i] if reached[i] else 0.0 for i in range(k)]
        prefix, products = 1.0, []
        for a in rates:
            prefix *= a
            products.append(prefix)
        dispersion = self.acceptance_dispersion()
        var = 0.0
        for i, a in enumerate(rates):
            if not reached[i] or not 0.0 < a < 1.0:
                continue
            derivative = sum(products[i:]) / a  # d AL / d a_i
            var += derivative**2 * a * (1.0 - a) / reached[i] * dispersion
        return math.sqrt(var)

    def _one_repeat(self, batch_size: int, k: int, steps: int) -> CellSample:
        try:
            sample = self.backend.measure(batch_size, k, steps)
        except DeterministicFailure as err:
            if is_out_of_memory(err) and batch_size > self.smallest_batch_size:
                raise BatchTooLarge(batch_size, err.reason) from err
            raise
        self.calls += 1
        return sample

    def _clearly_loses(self, stats: CellStats) -> bool:
        """Whether the cell loses to a measured K at its batch size beyond doubt.

        Its goodput's upper confidence bound is below the lower bound of a
        K measured there, so more repeats cannot make it the choice: racing
        stops them (after ``min_repeats``), as the CI rule would stop a winner.
        """
        if stats.repeats < self.sampling.min_repeats or stats.samples < 2:
            return False
        bs = stats.batch_size
        rivals = [k for k in self.measured_ks(bs) if k != stats.k]
        if not rivals:
            return False
        al = float(acceptance_lengths(self.per_position(), self.max_k)[stats.k])
        al += self.sampling.z * self.acceptance_length_sd(stats.k)
        upper = al / max(stats.mean_seconds - stats.half_width(self.sampling.z), 1e-12)
        return upper < max(self.goodput_bounds(bs, k)[0] for k in rivals)

    def drop_sizes_from(self, batch_size: int) -> None:
        """Forget every cell at ``batch_size`` or above (they do not fit)."""
        self.cells = {c: s for c, s in self.cells.items() if c[0] < batch_size}
        self.dropped_from = (
            batch_size if self.dropped_from is None else min(self.dropped_from, batch_size)
        )
        self.note(f"batch size {batch_size} and above do not fit: dropped")

    def note(self, line: str) -> None:
        """Record one search decision (kept in the raw output for review)."""
        self.log.append(line)

    # --- what the cells say ------------------------------------------------

    def top_k(self) -> int:
        """The largest K measured (0 before any speculative cell)."""
        return max((k for _, k in self.cells), default=0)

    def draft_counts(self) -> tuple[list[int], list[int]]:
        """Pooled (reached, accepted) per position, 1..maxK."""
        counts = pooled_counts(self.cells.values(), self.max_k)
        return counts.reached, counts.accepted

    def counts(self) -> DraftCounts:
        """Every pooled count per position, 1..maxK (``pooled_counts``)."""
        return pooled_counts(self.cells.values(), self.max_k)

    def per_position(self, positions: int | None = None) -> list[float]:
        """Conditional acceptance per position from pooled counts (missing drafts rejected).

        A position never drafted counts as 0.0: no evidence of acceptance is
        no reason to draft it.
        """
        drafted, accepted = self.draft_counts()
        n = self.max_k if positions is None else positions
        return [accepted[i] / drafted[i] if drafted[i] else 0.0 for i in range(n)]

    def goodput(self, batch_size: int, k: int) -> float:
        """AL(K) / ITL in tokens/s per sequence, from the pooled acceptance."""
        al = acceptance_lengths(self.per_position(), self.max_k)[k]
        return float(al) / self.cells[(batch_size, k)].mean_seconds

    def measured_ks(self, batch_size: int) -> list[int]:
        return sorted(k for bs, k in self.cells if bs == batch_size)

    def best_k(self, batch_size: int) -> int:
        """The measured K with the highest goodput at ``batch_size`` (ties: smaller K)."""
        ks = self.measured_ks(batch_size)
        if not ks:
            raise KeyError(f"nothing measured at batch size {batch_size}")
        scores = {k: self.goodput(batch_size, k) for k in ks}
        return max(ks, key=lambda k: (scores[k], -k))

    def measured_seconds(self) -> float:
        """Engine seconds in counted steps over all cells and baselines (warm-up excluded)."""
        cells = sum(s.measured_seconds for s in self.cells.values())
        return cells + sum(s.measured_seconds for s in self.baselines.values())


def pooled_counts(cells: Iterable[CellStats], positions: int) -> DraftCounts:
    """Per-position counts summed over cells, positions 1..``positions``.

    A cell measured by a backend that records only reached and accepted
    (every position it reached was proposed, as EAGLE and draft models do)
    counts proposed = reached, and its K positions as scheduled, and
    offered, by each of its sequence-steps.
    """
    out = DraftCounts(*([0] * positions for _ in range(5)))
    for stats in cells:
        n = min(positions, stats.k)
        reached = stats.drafted
        proposed = reached if stats.proposed is None else stats.proposed
        scheduled = stats.scheduled
        offered = stats.offered
        for i in range(n):
            out.reached[i] += _at(reached, i)
            out.proposed[i] += _at(proposed, i)
            out.accepted[i] += _at(stats.accepted, i)
            slots = stats.seq_steps if scheduled is None else _at(scheduled, i)
            out.scheduled[i] += slots
            out.offered[i] += slots if offered is None else _at(offered, i)
    return out


def proposal_survival(cells: Iterable[CellStats], positions: int) -> list[float]:
    """s_i = P(proposal length >= i), pooled over cells of different K: a product-limit estimate.

    A cell at K only shows proposals up to K (longer ones are cut at K), so
    summing offered/scheduled over cells mixes populations and can even
    rise with i. Instead s_1 pools every K >= 1 cell, and each further
    factor P(L >= i | L >= i-1) pools the cells with K >= i only. A cell
    that does not record offers proposes all K (factor 1). Where no cell
    reaches position i the last value is carried.
    """
    stats = list(cells)
    out: list[float] = []
    s = 1.0
    for i in range(positions):
        num = den = 0
        for c in stats:
            if c.k <= i:
                continue
            slots = c.seq_steps if c.scheduled is None else _at(c.scheduled, 0)
            offered = c.offered
            num += slots if offered is None else _at(offered, i)
            if i == 0:
                den += slots
            else:
                den += slots if offered is None else _at(offered, i - 1)
        if den:
            s *= num / den
        out.append(s)
    return out


def _at(values: list[int], i: int) -> int:
    return values[i] if i < len(values) else 0


Strategy = Callable[[Grid, list[int]], None]
"""A search: measures cells of ``Grid`` over the given ascending batch sizes."""
