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

Plain decoding's side is the profile's unless the pods timed it
(``LivePlain``): with the add-on's plugin a K=0 step is a plain step plus
the drafter's K=0 pass, which stateful drafters' pods time
(``vllm_addon.k0_pass``) and stateless ones (n-gram) do not run. Where a
batch bucket has such a live plain step, its cells compare the pods' own
step times, live against live, and the profile's noise (its plain and K=0
cells are separate measurements, each with its half-width) leaves R's
interval there; elsewhere the profile prices both sides as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.contract import bucket_of
from specdeploy.runtime.cost import StepCostModel
from specdeploy.runtime.goodput import FloatArray, acceptance_lengths
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
class LivePlain:
    """The pods' own step times in one window: plain decoding's and the cells' they ran.

    ``plain_ms`` per batch bucket (``contract.bucket_of``): the mean clean K=0
    step less the drafter's mean K=0 pass, where enough K=0 steps ran there.
    ``cell_ms`` per (bucket, K): the cells' mean clean step times.
    ``half_width`` per (bucket, K): the relative 95% half-width charged to a
    cell priced live against live (what the plugin leaves on a K=0 step
    beyond the drafter's pass, and the means' sampling error where the cell's
    steps are not the plain step's own).
    """

    plain_ms: Mapping[int, float]
    cell_ms: Mapping[tuple[int, int], float]
    half_width: Mapping[tuple[int, int], float]

    def covers(self, batch_size: int, k: int) -> bool:
        bucket = bucket_of(batch_size)
        return bucket in self.plain_ms and (bucket, k) in self.cell_ms


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
    live_share: float = 0.0
    """The share of the mix's steps priced live against live (``LivePlain``)."""


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


@dataclass
class _Priced:
    """The mix's cells as priced: by the profile (live-corrected) or live against live."""

    modelled: dict[tuple[int, int], float]
    live: dict[tuple[int, int], float]
    """(batch size, K) -> weight, priced by ``LivePlain``'s step times."""
    plain: float
    """Plain decoding's throughput summed over both, weighted."""


def _priced(
    spec: ProfileSpec,
    goodput: FloatArray,
    itl_scale: FloatArray | None,
    mix: Mapping[tuple[int, int], float],
    timed: LivePlain | None,
) -> _Priced:
    """The cells of ``mix`` both sides can price (row clipped to ``goodput``'s grid), and
    plain decoding's throughput over them: the pods' own where ``timed`` covers a cell."""
    model = cost_model(spec)
    rows, cols = goodput.shape
    out = _Priced({}, {}, 0.0)
    for (bs, k), weight in mix.items():
        col = int(k)
        if weight <= 0 or not 0 <= col <= spec.fingerprint.max_k:
            continue
        if timed is not None and timed.covers(max(int(bs), 1), col):
            size = max(int(bs), 1)
            out.live[(size, col)] = out.live.get((size, col), 0.0) + weight
            out.plain += weight * size * 1000.0 / timed.plain_ms[bucket_of(size)]
            continue
        row = min(max(int(bs), 1), rows - 1)
        base = _plain_throughput(model, itl_scale, row)
        if base <= 0 or col >= cols or not np.isfinite(goodput[row, col]):
            continue
        out.modelled[(row, col)] = out.modelled.get((row, col), 0.0) + weight
        out.plain += weight * base
    return out


def live_ratio(
    spec: ProfileSpec,
    *,
    per_position: Sequence[float],
    half_width: Sequence[float],
    itl_scale: FloatArray | None,
    mix: Mapping[tuple[int, int], float],
    timed: LivePlain | None = None,
) -> LiveRatio | None:
    """R at the served ``mix`` (share of steps per (batch size, K)), with its interval.

    Where ``timed`` has plain decoding's step and the cell's in the cell's
    bucket, the cell's throughput is its acceptance length over its live step
    time, and plain decoding's is one token per live plain step: the pods'
    own clocks on both sides, ``timed.half_width`` of cost uncertainty.
    Elsewhere the step cost of both sides is the profile's, scaled per batch
    size by the live correction ``itl_scale``: the same hardware runs plain
    decoding, so the scale that corrects the speculative cells corrects its
    baseline too. What stays the profile's there is the gap between a
    speculative step and a plain one, K=0 with speculation configured
    included: a profile that under-prices that gap over-states R, which the
    ``high`` bound carries only as far as the profile's half-widths do.
    Cells neither side can price are left out of both. None without a priced
    mix (a profile without a plain baseline prices only the live cells):
    nothing can then say.
    """
    if not mix:
        return None
    at_estimate = live_goodput_grid(spec, per_position, itl_scale)
    priced = _priced(spec, at_estimate, itl_scale, mix, timed)
    if priced.plain <= 0:
        return None
    n = len(per_position)
    widths = list(half_width) + [0.0] * n
    lower = [min(max(a - w, 0.0), 1.0) for a, w in zip(per_position, widths, strict=False)]
    upper = [min(max(a + w, 0.0), 1.0) for a, w in zip(per_position, widths, strict=False)]
    max_k = spec.fingerprint.max_k

    def ratio_at(acceptance: Sequence[float], grid: FloatArray | None = None) -> float:
        if grid is None:
            grid = live_goodput_grid(spec, acceptance, itl_scale)
        total = sum(w * row * float(grid[row, k]) for (row, k), w in priced.modelled.items())
        if priced.live and timed is not None:
            lengths = acceptance_lengths(acceptance, max_k)
            total += sum(
                w * size * float(lengths[k]) * 1000.0 / timed.cell_ms[(bucket_of(size), k)]
                for (size, k), w in priced.live.items()
            )
        return total / priced.plain

    mid = ratio_at(per_position, at_estimate)
    modelled_weight = sum(priced.modelled.values())
    live_weight = sum(priced.live.values())
    live_spread = 0.0
    if timed is not None:
        live_spread = sum(
            w * timed.half_width.get((bucket_of(size), k), 0.0)
            for (size, k), w in priced.live.items()
        )
    cost = (_cost_half_width(spec, priced.modelled) * modelled_weight + live_spread) / (
        modelled_weight + live_weight
    )
    low = ratio_at(lower) * (1.0 - cost)
    high = ratio_at(upper) * (1.0 + cost)
    sizes = tuple(sorted({row for row, _ in (*priced.modelled, *priced.live)}))
    share = live_weight / (modelled_weight + live_weight)
    return LiveRatio(
        round(mid, 4), round(min(low, mid), 4), round(max(high, mid), 4), sizes, round(share, 4)
    )
