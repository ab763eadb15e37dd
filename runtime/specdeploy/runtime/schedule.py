"""From a profile's measurements to a K schedule, and to and from vLLM's table.

A profile measures step time (ITL) on a sparse grid of (batch size, K,
context) cells. The schedule needs a K for *every* batch size a pod can see:
the cells fit the step-cost model of ``cost.py`` (ITL from the tokens
actually verified and the context read), which prices every batch size and
K at the serving context, and the schedule picks the measured K that
maximises goodput = AL(K) / ITL(bs, K) at each integer batch size, with AL
from the acceptance that counts a missing draft as a rejection
(``goodput``). The result is compressed into inclusive ranges, which is the
shape vLLM's ``speculative_config.num_speculative_tokens_per_batch_size``
takes. ``itl_grid`` is the measured cells interpolated per K, for display.

vLLM's rules, as read in vllm-project/vllm (0.32 line):

``vllm/v1/spec_decode/dynamic/utils.py``, ``validate_and_normalize_dynamic_sd_schedule``
  * the table must be a non-empty list;
  * every entry is a 3-item sequence ``(range_start, range_end, K)``, each item
    passed through ``int()`` (``vllm/config/speculative.py`` types the field as
    ``list[tuple[int, int, int]] | None``, so pydantic also checks the arity);
  * ``range_start > 0`` and ``range_end > 0``; ``range_start <= range_end``;
  * ``K >= 0``;
  * entries are sorted by ``range_start`` and then must not overlap (a start
    at or below the previous end is an error: "non-overlapping and sorted");
  * the first range must start at 1.

``build_dynamic_sd_schedule_lookup`` (same file), called from
``Scheduler.__init__`` in ``vllm/v1/core/sched/scheduler.py`` with
``vllm_max_batch_size=scheduler_config.max_num_seqs`` and
``vllm_num_speculative_tokens=num_spec_tokens``:
  * both must be > 0 (``SpeculativeConfig.num_speculative_tokens`` is also
    declared ``gt=0``), so a table needs maxK >= 1;
  * a dense list of ``max_num_seqs + 1`` ints; index 0 is unused and left 0 so
    that ``lookup[batch_size]`` needs no offset;
  * a gap between ranges inherits the previous range's K, and every batch size
    after the last range (up to ``max_num_seqs``) inherits the last K; ranges
    past ``max_num_seqs`` are ignored;
  * every K is clamped to ``min(num_speculative_tokens, K)``.
The scheduler reads ``lookup[len(num_scheduled_tokens)]`` once per step
(only when something is scheduled): the index counts every scheduled request,
prefills included.

Validation happens when the scheduler is built, i.e. at engine start, so a bad
table kills the pod. Our own rules on top, so we never depend on vLLM's
forgiveness: K <= maxK (no reliance on clamping), entries exactly three real
ints (no bools, no floats), and entries already sorted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.cost import Cell, StepCostModel
from specdeploy.runtime.goodput import FloatArray, acceptance_lengths, verified_per_sequence

if TYPE_CHECKING:
    from specdeploy.runtime.profile import ProfileSpec, SpeculationProfile

IntArray = npt.NDArray[np.int64]
Range = tuple[int, int, int]
"""One inclusive schedule entry: (first batch size, last batch size, K)."""


class ScheduleError(ValueError):
    """A batch-size table vLLM would refuse; ``problems`` lists every rule broken."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid schedule: " + "; ".join(problems))


# --- the grids -----------------------------------------------------------


def _max_batch_size(spec: ProfileSpec, max_batch_size: int | None) -> int:
    """The grid's last row: the caller's choice or the largest measured batch size."""
    if max_batch_size is None:
        return max(m.batch_size for m in spec.measurements)
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    return max_batch_size


def _itl_column(
    points: list[tuple[int, float]], rows: int, profile_span: tuple[int, int]
) -> FloatArray:
    """ITL for one K at every integer batch size 0..rows-1, NaN where unknown.

    Interpolation stays inside the batch sizes measured for this K: guessing
    beyond them would invent step costs. The exception is the edge of the whole
    profile: a K measured at the profile's smallest (largest) batch size is the
    best evidence there is below (above) it, so it is held constant there.
    """
    bs = np.array([p[0] for p in points], dtype=np.float64)
    itl = np.array([p[1] for p in points], dtype=np.float64)
    sizes = np.arange(rows, dtype=np.float64)
    lo = bs[0] if bs[0] > profile_span[0] else 1.0
    hi = bs[-1] if bs[-1] < profile_span[1] else float(rows)
    column = np.interp(sizes, bs, itl)  # holds the end values outside [bs[0], bs[-1]]
    column[(sizes < lo) | (sizes > hi) | (sizes == 0)] = np.nan
    return column


def itl_grid(spec: ProfileSpec, max_batch_size: int | None = None) -> FloatArray:
    """Step time in ms, shape (max_bs + 1, maxK + 1), indexed [batch size, K].

    Row 0 is unused (NaN) so the grid is indexed by batch size directly, like
    vLLM's lookup. A cell is NaN where that K cannot be estimated: K never
    measured, or a batch size outside that K's measured span (see
    ``_itl_column``). K=0 is measured at every measured batch size (the
    profile's validation guarantees it), so column 0 is complete.
    """
    rows = _max_batch_size(spec, max_batch_size) + 1
    grid = np.full((rows, spec.fingerprint.max_k + 1), np.nan, dtype=np.float64)
    sizes = [m.batch_size for m in spec.measurements]
    span = (min(sizes), max(sizes))
    for k in k_values(spec):
        points = sorted((m.batch_size, m.itl_ms) for m in spec.measurements if m.k == k)
        grid[:, k] = _itl_column(points, rows, span)
    return grid


def cost_model(spec: ProfileSpec) -> StepCostModel:
    """The profile's cells fitted to ``cost.StepCostModel``, its baseline as plain decoding.

    Cells without ``verifiedTokens`` (profiles made before it was recorded)
    are taken to verify K + 1 tokens per sequence; cells without
    ``contextTokens`` to share one context (no context axis).
    """
    cells = [
        Cell(
            batch_size=m.batch_size,
            k=m.k,
            itl_ms=m.itl_ms,
            verified_per_sequence=m.verified_tokens if m.verified_tokens else 1.0 + m.k,
            context_per_sequence=m.context_tokens or 0.0,
            weight=float(m.samples),
        )
        for m in spec.measurements
    ]
    vanilla = [(b.batch_size, b.itl_ms) for b in spec.baseline]
    return StepCostModel.fit(cells, vanilla)


def proposal_survival(spec: ProfileSpec) -> tuple[float, ...]:
    """s_i = P(proposal length >= i) per position: the profile's, else always proposed."""
    survival = spec.acceptance.proposal_survival
    return tuple(survival) if survival is not None else (1.0,) * spec.fingerprint.max_k


def modelled_itl_grid(
    spec: ProfileSpec,
    max_batch_size: int | None = None,
    *,
    survival: Sequence[float] | None = None,
    context_per_sequence: float | None = None,
) -> FloatArray:
    """ITL in ms from the cost model, shape (max_bs + 1, maxK + 1); NaN where unavailable.

    ``survival`` (P(proposal length >= i)) reprices the cells' verified tokens
    for other proposal lengths; None keeps the profile's own.

    Only measured K compete (vLLM captures CUDA graphs for the K in its table
    only), and each only inside the batch sizes it was measured at (as
    ``itl_grid`` says: guessing beyond them would invent step costs, and a
    smart search leaves out cells it found losing); ``survival`` and
    ``context_per_sequence`` default to the profile's.
    """
    rows = _max_batch_size(spec, max_batch_size)
    model = cost_model(spec)
    verified = None
    if survival is not None:
        verified = [verified_per_sequence(survival, k) for k in range(spec.fingerprint.max_k + 1)]
    grid = model.grid(rows, spec.fingerprint.max_k, verified, context_per_sequence)
    grid[np.isnan(itl_grid(spec, max_batch_size))] = np.nan
    return grid


def goodput_grid(
    spec: ProfileSpec,
    max_batch_size: int | None = None,
    per_position: Sequence[float] | None = None,
) -> FloatArray:
    """Goodput AL(K) / ITL in tokens/s per sequence, shape (max_bs + 1, maxK + 1).

    ITL from the cost model (``modelled_itl_grid``: exact at measured cells,
    verified tokens from the profile's proposal lengths); acceptance from the
    profile unless ``per_position`` overrides it (live telemetry: acceptance
    depends on the workload, step cost on the hardware, so the two are merged
    here). NaN for K never measured.
    """
    rates = spec.acceptance.per_position if per_position is None else per_position
    itl_ms = modelled_itl_grid(spec, max_batch_size)
    lengths = acceptance_lengths(rates, spec.fingerprint.max_k)
    result: FloatArray = lengths[np.newaxis, :] / (itl_ms / 1000.0)
    return result


def vanilla_gain(spec: ProfileSpec, max_batch_size: int | None = None) -> FloatArray | None:
    """Best-K goodput over plain decoding's, per batch size (index = batch size; 0 NaN).

    None when the profile has no baseline: nothing then knows what turning
    speculation off would give. Below 1.0, speculation loses at that size.
    """
    model = cost_model(spec)
    if not model.vanilla_sizes:
        return None
    goodput = goodput_grid(spec, max_batch_size)
    rows = goodput.shape[0]
    best = np.nanmax(np.where(np.isnan(goodput), -np.inf, goodput), axis=1)
    gain = np.full(rows, np.nan)
    for bs in range(1, rows):
        vanilla = model.vanilla_itl_ms(bs, model.reference_context)
        if vanilla is not None:
            gain[bs] = best[bs] / (1000.0 / vanilla)
    result: FloatArray = gain
    return result


def best_k_per_batch_size(goodput: FloatArray, allowed: Sequence[int] | None = None) -> IntArray:
    """K maximising goodput at each batch size (index = batch size; index 0 is 0).

    Only available (non-NaN) cells of ``allowed`` K compete; ties go to the
    smaller K, which drafts less for the same predicted gain. A batch size
    where no allowed K is available gets K=0: plain decoding is always
    possible and is the baseline the rest must beat.
    """
    scores = np.where(np.isnan(goodput), -np.inf, goodput)
    if allowed is not None:
        mask = np.zeros(goodput.shape[1], dtype=bool)
        mask[[k for k in allowed if 0 <= k < goodput.shape[1]]] = True
        scores[:, ~mask] = -np.inf
    best: IntArray = np.argmax(scores, axis=1).astype(np.int64)  # first max: smaller K
    best[~np.isfinite(scores).any(axis=1)] = 0
    best[0] = 0
    return best


# --- schedules -----------------------------------------------------------


def k_values(spec: ProfileSpec) -> tuple[int, ...]:
    """The K values measured at least once, ascending: the only K we may choose.

    vLLM's V2 runner captures CUDA graphs for the K values in the table only,
    so a K without a measurement (and without a graph) is never scheduled.
    """
    return tuple(sorted({m.k for m in spec.measurements}))


def compress(best: Sequence[int] | IntArray) -> list[Range]:
    """Inclusive ranges from a per-batch-size K list (index = batch size, 0 ignored)."""
    ranges: list[Range] = []
    for bs in range(1, len(best)):
        k = int(best[bs])
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], bs, k)
        else:
            ranges.append((bs, bs, k))
    return ranges


REGRET_TOLERANCE = 0.0075
"""Goodput a settled close call may plausibly lose (the search's target is 1%)."""


def derive_schedule(spec: ProfileSpec, max_batch_size: int | None = None) -> list[Range]:
    """The goodput-optimal schedule: contiguous ranges from 1 to max_bs, equal K merged.

    Where the profile records step-time intervals (``itlHalfWidthMs``), a
    smaller K that the best K does not beat beyond the interval of their
    difference is a tie the measurements cannot break, and it wins: it
    drafts less for what may be the same gain (``break_ties``).
    """
    goodput = goodput_grid(spec, max_batch_size)
    best = best_k_per_batch_size(goodput, allowed=k_values(spec))
    relative = relative_half_widths(spec, goodput.shape[0] - 1, goodput.shape[1])
    if relative is not None:
        best = break_ties(goodput, relative, best, allowed=k_values(spec))
    return compress(best)


def relative_half_widths(spec: ProfileSpec, max_batch_size: int, columns: int) -> FloatArray | None:
    """Relative 95% half-width of each K's step time per batch size, shape (max_bs + 1,
    columns): measured at the cells that record one, nearest measured batch size
    in log scale elsewhere (0 for a K without any); None when no cell records one."""
    measured: dict[int, list[tuple[int, float]]] = {}
    for m in spec.measurements:
        if m.itl_half_width_ms is not None and m.k < columns:
            measured.setdefault(m.k, []).append((m.batch_size, m.itl_half_width_ms / m.itl_ms))
    if not measured:
        return None
    out = np.zeros((max_batch_size + 1, columns))
    sizes = np.log(np.arange(1, max_batch_size + 1, dtype=np.float64))
    for k, points in measured.items():
        points.sort()
        xs = np.log(np.array([bs for bs, _ in points], dtype=np.float64))
        ys = np.array([r for _, r in points])
        nearest = np.abs(sizes[:, None] - xs[None, :]).argmin(axis=1)
        out[1:, k] = ys[nearest]
    return out


def break_ties(
    goodput: FloatArray,
    relative: FloatArray,
    best: IntArray,
    allowed: Sequence[int] | None = None,
) -> IntArray:
    """At each batch size, the smallest allowed K the measurements cannot tell from
    the chosen one: its lead is inside the 95% interval of their difference
    by more than ``REGRET_TOLERANCE`` (``relative``: each cell's relative
    half-width; the difference's is their root sum of squares, the cells
    being measured apart). That is the profiler's own test for a settled
    close call (``search.settle``): a call it settled keeps its leader, one
    the budget left open goes to the K that drafts less. Adding half-widths
    instead would call a 2% lead of two +-1% cells a tie and give 2% away."""
    out = best.copy()
    ks = sorted(range(goodput.shape[1]) if allowed is None else allowed)
    for bs in range(1, goodput.shape[0]):
        chosen = int(best[bs])
        lead = goodput[bs, chosen]
        if not np.isfinite(lead):
            continue
        for k in ks:
            if k >= chosen:
                break
            g = goodput[bs, k]
            if not np.isfinite(g):
                continue
            width = math.hypot(lead * relative[bs, chosen], g * relative[bs, k])
            if lead - g < width - REGRET_TOLERANCE * lead:
                out[bs] = k
                break
    return out


def derive_profile(doc: SpeculationProfile) -> SpeculationProfile:
    """A copy of ``doc`` whose ``spec.schedule`` is derived from its measurements."""
    return doc.with_schedule(derive_schedule(doc.spec))


def format_schedule(schedule: Sequence[Sequence[int]]) -> str:
    """The compact human form used in status and tables: ``1-16:5 17-64:3``."""
    return " ".join(f"{lo}-{hi}:{k}" for lo, hi, k in schedule)


# --- vLLM's rules --------------------------------------------------------


def _well_formed(entry: object) -> bool:
    """Exactly three ints (bools are ints to Python, never to us)."""
    return (
        isinstance(entry, list | tuple)
        and len(entry) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
    )


def _entry_problems(i: int, entry: object, max_k: int) -> Iterator[str]:
    """Problems of one entry taken alone (shape, signs, bounds)."""
    if not _well_formed(entry):
        yield f"[{i}]: must be [bsLo, bsHi, k], three integers, got {entry!r}"
        return
    assert isinstance(entry, list | tuple)
    lo, hi, k = entry
    if lo < 1 or hi < 1:
        yield f"[{i}]: batch sizes must be >= 1, got range {lo}-{hi}"
    elif lo > hi:
        yield f"[{i}]: range start {lo} is after its end {hi}"
    if k < 0:
        yield f"[{i}]: k must be >= 0, got {k}"
    elif k > max_k:
        yield f"[{i}]: k={k} exceeds maxK={max_k} (vLLM would clamp it; we never rely on that)"


def _order_problems(entries: list[Range]) -> Iterator[str]:
    """Problems between entries: first start, order, overlap."""
    if entries[0][0] != 1:
        yield f"[0]: the first range must start at batch size 1, got {entries[0][0]}"
    for i in range(1, len(entries)):
        (plo, phi, _), (lo, hi, _) = entries[i - 1], entries[i]
        if lo < plo:
            yield f"[{i}]: ranges must be sorted; {lo}-{hi} comes after {plo}-{phi}"
        elif lo <= phi:
            yield f"[{i}]: range {lo}-{hi} overlaps the previous range {plo}-{phi}"


def schedule_problems(schedule: object, *, max_k: int) -> Iterator[str]:
    """Every rule of vLLM (plus ours, see the module docstring) the table breaks.

    Each problem starts with ``[i]`` (entry i) or ``:`` (the whole table) so the
    caller can prefix the field's path, e.g. ``spec.schedule[2]: ...``.
    """
    if not isinstance(schedule, list | tuple):
        yield f": must be a list of [bsLo, bsHi, k] entries, got {type(schedule).__name__}"
        return
    if not schedule:
        yield ": must not be empty (vLLM refuses an empty table)"
        return
    if max_k < 1:
        yield f": needs maxK >= 1 (vLLM's num_speculative_tokens must be > 0), got {max_k}"
    for i, entry in enumerate(schedule):
        yield from _entry_problems(i, entry, max_k)
    if all(_well_formed(e) for e in schedule):
        yield from _order_problems([(e[0], e[1], e[2]) for e in schedule])


def _vllm_problems(ranges: object) -> list[str]:
    """vLLM's own rules only (it sorts for us and clamps K, so those pass)."""
    if not isinstance(ranges, list | tuple):
        return [": must be a list of [bsLo, bsHi, k] entries"]
    unbounded = 1 << 62  # vLLM has no upper K bound: it clamps instead
    if all(_well_formed(e) for e in ranges):
        ranges = sorted(ranges, key=lambda e: int(e[0]))
    return list(schedule_problems(ranges, max_k=unbounded))


def validate_vllm(ranges: object) -> list[Range]:
    """The table as vLLM accepts it, sorted; raise ScheduleError where vLLM would."""
    problems = _vllm_problems(ranges)
    if problems:
        raise ScheduleError(problems)
    assert isinstance(ranges, list | tuple)
    return sorted((int(e[0]), int(e[1]), int(e[2])) for e in ranges)


def to_vllm(schedule: Sequence[Sequence[int]]) -> list[list[int]]:
    """The JSON-ready value for ``num_speculative_tokens_per_batch_size``."""
    return [[int(lo), int(hi), int(k)] for lo, hi, k in schedule]


def from_vllm(ranges: object, num_speculative_tokens: int) -> list[Range]:
    """A vLLM table in our canonical form: contiguous from 1, clamped, equal K merged.

    Gaps take the previous K and every K is clamped to
    ``num_speculative_tokens``, exactly as vLLM expands it; the result covers
    1..(last configured batch size); beyond it vLLM repeats the last K.
    """
    if num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be > 0, got {num_speculative_tokens}")
    entries = validate_vllm(ranges)
    result: list[Range] = []
    for i, (lo, hi, k) in enumerate(entries):
        end = entries[i + 1][0] - 1 if i + 1 < len(entries) else hi  # a gap inherits k
        k = min(k, num_speculative_tokens)
        if result and result[-1][2] == k:
            result[-1] = (result[-1][0], end, k)
        else:
            result.append((lo, end, k))
    return result


def expand_lookup(ranges: object, num_speculative_tokens: int, max_batch_size: int) -> list[int]:
    """vLLM's dense ``dynamic_sd_lookup``: ``lookup[n]`` is K for n scheduled requests.

    Length ``max_batch_size + 1`` (vLLM passes ``max_num_seqs``); index 0 is 0
    and unused. Each batch size takes the K of the last range starting at or
    below it, which is the range holding it, or the one before a gap, or the
    last range for the tail; clamped to ``num_speculative_tokens``.
    """
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be > 0, got {max_batch_size}")
    if num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be > 0, got {num_speculative_tokens}")
    entries = validate_vllm(ranges)
    lookup = [0] * (max_batch_size + 1)
    for lo, _, k in entries:
        if lo <= max_batch_size:
            lookup[lo:] = [min(k, num_speculative_tokens)] * (max_batch_size + 1 - lo)
    return lookup
