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

The table's shape and vLLM's rules for it are ``ranges``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from specdeploy.runtime.cost import Cell, StepCostModel
from specdeploy.runtime.goodput import FloatArray, acceptance_lengths, verified_per_sequence
from specdeploy.runtime.ranges import IntArray, Range, compress

if TYPE_CHECKING:
    from specdeploy.runtime.profile import ProfileSpec


def grid_rows(spec: ProfileSpec) -> int:
    """Rows of the profile's grids: its largest measured batch size + 1 (row 0 unused)."""
    return max(m.batch_size for m in spec.measurements) + 1


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
