"""The plain-decoding floor: does speculation beat not speculating, at the batch sizes served?

K=0 with speculation configured is not plain decoding (the drafter's sync
pass, the speculation bookkeeping, piecewise graphs cost +7-22% upstream,
vLLM #49548), and a running pod cannot switch speculation off: only a
Deployment without ``--speculative-config`` can. So the decision is the
operator's (and the simulator's ``specdeploy`` policy models it with this
same function), from the profile's plain-decoding baseline
(``ProfileSpec.baseline``) and its cost model: the predicted gain of the best
K over plain decoding (``schedule.vanilla_gain``) at each batch size the
pool serves. Until the telemetry loop reports the batch sizes a pool
actually serves, those are the profiled ones the spec asked for
(``spec.profiling.batchSizes``).

``live_ratio`` is the live floor's signal (issue 31): R, the throughput of
what the pods ran over plain decoding's at the (batch size, K) mix they
served, from live acceptance and the live-corrected cost model, with an
interval. Pure.

The mix is the K the add-on chose, not the table in force: a pod whose
add-on has fallen to K=0 proposes nothing, so its acceptance is unobserved
(the estimate returns to the profile's prior) and the table priced at that
prior says speculation wins while the pod pays K=0's tax on every step. The
floor must judge what runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.cost import StepCostModel
from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.live import live_goodput_grid
from specdeploy.runtime.profile import ProfileSpec
from specdeploy.runtime.schedule import cost_model, vanilla_gain


@dataclass(frozen=True)
class FloorVerdict:
    """What the profile predicts against plain decoding for one pool."""

    gain: float | None
    """Mean over the served batch sizes of best-K goodput / plain decoding's
    (None: the profile has no baseline, so nothing can say)."""
    loses: bool
    """Speculation is predicted slower than plain decoding at every served size."""
    sizes: tuple[int, ...]


def judge(profile: ProfileSpec, served: Sequence[int]) -> FloorVerdict:
    """The verdict at the ``served`` batch sizes the profile covers."""
    gains = vanilla_gain(profile)
    if gains is None:
        return FloorVerdict(None, False, ())
    top = gains.shape[0] - 1
    sizes = tuple(sorted({min(bs, top) for bs in served if bs >= 1}))
    values = [float(gains[bs]) for bs in sizes if np.isfinite(gains[bs])]
    if not values:
        return FloorVerdict(None, False, ())
    return FloorVerdict(round(float(np.mean(values)), 4), all(v < 1.0 for v in values), sizes)


@dataclass(frozen=True)
class LiveRatio:
    """R = throughput of the K the pods ran / plain decoding's, at the served mix.

    ``low`` and ``high`` bound it at 95%: acceptance at the ends of its live
    interval, and the profile's relative step-time half-widths (plain decoding's
    and the cells' the pods ran) added on top. Conservative by construction
    (the bounds add, they do not combine in quadrature), because the live
    floor acts on ``high`` below 1 and returns on ``low`` above 1.
    """

    ratio: float
    low: float
    high: float
    sizes: tuple[int, ...]
    """The batch sizes served in the window (the mix's support)."""


def _nearest_relative_half_width(
    entries: Sequence[tuple[int, float, float | None]], batch_size: int
) -> float:
    """The relative half-width of the entry measured nearest ``batch_size`` (0: none known)."""
    if not entries:
        return 0.0
    size, itl, half = min(entries, key=lambda e: (abs(e[0] - batch_size), e[0]))
    del size
    return 0.0 if half is None or itl <= 0 else half / itl


def _cost_half_width(spec: ProfileSpec, mix: Mapping[tuple[int, int], float]) -> float:
    """The weighted relative uncertainty of step cost against plain decoding's, per the
    profile's own half-widths: sqrt(plain's² + the served cell's²) for each (size, K)."""
    vanilla = [(b.batch_size, b.itl_ms, b.itl_half_width_ms) for b in spec.baseline]
    total = sum(mix.values())
    if total <= 0:
        return 0.0
    spread = 0.0
    for (bs, k), weight in mix.items():
        cells = [
            (m.batch_size, m.itl_ms, m.itl_half_width_ms) for m in spec.measurements if m.k == k
        ]
        rel = np.hypot(
            _nearest_relative_half_width(vanilla, bs), _nearest_relative_half_width(cells, bs)
        )
        spread += weight * float(rel)
    return spread / total


def _plain_throughput(model: StepCostModel, itl_scale: FloatArray | None, row: int) -> float:
    """Plain decoding's tokens/s at batch size ``row``: its profiled step time, live-corrected
    (0: the profile cannot price it)."""
    itl = model.vanilla_itl_ms(row, model.reference_context)
    if itl is None:
        return 0.0
    scale = 1.0 if itl_scale is None else float(itl_scale[row])
    return row * 1000.0 / (itl * scale)


def _priced(
    spec: ProfileSpec,
    goodput: FloatArray,
    itl_scale: FloatArray | None,
    mix: Mapping[tuple[int, int], float],
) -> tuple[dict[tuple[int, int], float], float]:
    """The cells of ``mix`` both sides can price (row clipped to ``goodput``'s grid), and
    plain decoding's throughput over them."""
    model = cost_model(spec)
    rows, cols = goodput.shape
    cells: dict[tuple[int, int], float] = {}
    plain = 0.0
    for (bs, k), weight in mix.items():
        row = min(max(int(bs), 1), rows - 1)
        col = int(k)
        base = _plain_throughput(model, itl_scale, row)
        if weight <= 0 or base <= 0 or not 0 <= col < cols or not np.isfinite(goodput[row, col]):
            continue
        cells[(row, col)] = cells.get((row, col), 0.0) + weight
        plain += weight * base
    return cells, plain


def live_ratio(
    spec: ProfileSpec,
    *,
    per_position: Sequence[float],
    half_width: Sequence[float],
    itl_scale: FloatArray | None,
    mix: Mapping[tuple[int, int], float],
) -> LiveRatio | None:
    """R at the served ``mix`` (share of steps per (batch size, K)), with its interval.

    The step cost of both sides is the profile's, scaled per batch size by the
    live correction ``itl_scale``: the same hardware runs plain decoding, so the
    scale that corrects the speculative cells corrects its baseline too (a pod
    that speculates never runs a plain step to time). What stays the profile's
    is the gap between a speculative step and a plain one, K=0 with speculation
    configured included: a profile that under-prices that gap over-states R,
    which the ``high`` bound carries only as far as the profile's half-widths do.
    Cells neither side can price are left out of both. None without a baseline
    or a priced mix: nothing can then say.
    """
    if not spec.baseline or not mix:
        return None
    at_estimate = live_goodput_grid(spec, per_position, itl_scale)
    cells, plain = _priced(spec, at_estimate, itl_scale, mix)
    if plain <= 0:
        return None
    n = len(per_position)
    widths = list(half_width) + [0.0] * n
    lower = [min(max(a - w, 0.0), 1.0) for a, w in zip(per_position, widths, strict=False)]
    upper = [min(max(a + w, 0.0), 1.0) for a, w in zip(per_position, widths, strict=False)]

    def ratio_of(grid: FloatArray) -> float:
        total = sum(w * row * float(grid[row, k]) for (row, k), w in cells.items())
        return total / plain

    def ratio_at(acceptance: Sequence[float]) -> float:
        return ratio_of(live_goodput_grid(spec, acceptance, itl_scale))

    mid = ratio_of(at_estimate)
    cost = _cost_half_width(spec, cells)
    low = ratio_at(lower) * (1.0 - cost)
    high = ratio_at(upper) * (1.0 + cost)
    sizes = tuple(sorted({row for row, _ in cells}))
    return LiveRatio(round(mid, 4), round(min(low, mid), 4), round(max(high, mid), 4), sizes)
