"""Live acceptance and live step-cost corrections from one pool's window, with confidence.

Acceptance (DESIGN.md, "The math"): a_i = accepted_i / reached_i, where a
reached position the drafter did not propose counts as rejected; the
drafting rate q_i = proposed_i / reached_i. The estimate is shrunk toward
the profile's a_i with ``prior_weight`` pseudo-counts
(``goodput.per_position_from_counts``), so a position rarely reached stays
near the profile and a busy one follows the traffic. Its 95% half-width
treats ``design_effect`` reached positions as one independent draw (tokens
of one request are correlated).

Step cost: per (batch bucket, K) cell, the live mean step time over the
profile's cost model at the bucket's middle batch size. The table's
correction is one scale per bucket, pooled over the K observed there and
shrunk toward 1.0 (``cost_prior_steps``): a slower clock slows every K, and
a K not run live cannot be told apart from the others anyway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.operator.telemetry.window import Cell, PoolWindow, StepTimes
from specdeploy.runtime.contract import (
    K0_PASS_DRAFTERS,
    STATELESS_DRAFTERS,
    bucket_bounds,
    bucket_index,
)
from specdeploy.runtime.cost import StepCostModel
from specdeploy.runtime.floor import LivePlain
from specdeploy.runtime.goodput import FloatArray, per_position_from_counts

Z95 = 1.96


@dataclass(frozen=True)
class AcceptanceEstimate:
    """Per position: the blended a_i, its 95% half-width, the drafting rate, the counts."""

    per_position: tuple[float, ...]
    half_width: tuple[float, ...]
    drafting_rate: tuple[float | None, ...]
    reached: tuple[float, ...]
    proposed: tuple[float, ...]
    accepted: tuple[float, ...]
    confident: bool


def half_width(p: float, n: float, design_effect: float) -> float:
    """95% half-width of a rate ``p`` from ``n`` counts, ``design_effect`` counts per draw."""
    effective = n / max(design_effect, 1.0)
    if effective <= 0:
        return 1.0
    return min(Z95 * math.sqrt(max(p * (1.0 - p), 0.25 / effective) / effective), 1.0)


def _trim(values: Sequence[float], n: int) -> list[float]:
    return [float(v) for v in list(values)[:n]] + [0.0] * max(n - len(values), 0)


def estimate_acceptance(
    window: PoolWindow, prior: Sequence[float], settings: TelemetrySettings
) -> AcceptanceEstimate:
    """The live acceptance of ``len(prior)`` positions (module docstring).

    Counts are clipped to accepted <= proposed <= reached (Prometheus'
    extrapolation and a scrape that saw half a step can break it slightly).
    Confident when position 1 was reached ``min_reached`` times with a
    half-width within ``confident_half_width``: position 1 weighs most in
    AL(K) and is reached most, and deeper positions with wider intervals
    lean on the prior through the blend, which is what the brief's "blend
    with the profile's acceptance otherwise" asks, per position.
    """
    n = len(prior)
    reached = [max(v, 0.0) for v in _trim(window.reached, n)]
    proposed = [
        min(max(p, 0.0), r) for p, r in zip(_trim(window.proposed, n), reached, strict=True)
    ]
    accepted = [
        min(max(a, 0.0), r) for a, r in zip(_trim(window.accepted, n), reached, strict=True)
    ]
    blended = per_position_from_counts(reached, accepted, prior, settings.prior_weight)
    widths = tuple(
        half_width(accepted[i] / reached[i] if reached[i] > 0 else float(prior[i]),
                    reached[i] + settings.prior_weight, settings.design_effect)
        for i in range(n)
    )  # fmt: skip
    drafting = tuple(proposed[i] / reached[i] if reached[i] > 0 else None for i in range(n))
    confident = (
        n > 0 and reached[0] >= settings.min_reached and widths[0] <= settings.confident_half_width
    )
    return AcceptanceEstimate(
        per_position=tuple(float(x) for x in blended),
        half_width=widths,
        drafting_rate=drafting,
        reached=tuple(reached),
        proposed=tuple(proposed),
        accepted=tuple(accepted),
        confident=confident,
    )


# --- step cost -------------------------------------------------------------


def bucket_middle(bucket: int) -> float:
    """The mean batch size of a bucket, batch sizes taken as uniform inside it."""
    lo, hi = bucket_bounds(bucket)
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class CellRatio:
    """Live mean step time of one cell over the profile's prediction there."""

    bucket: int
    k: int
    ratio: float
    steps: float


def cell_mean_size(sizes: Mapping[Cell, float], cell: Cell, count: float, top: int) -> float | None:
    """The mean batch size of a cell's steps (its summed ``sizes`` over ``count``), held to its
    bucket and to ``top``; None where the pods did not export the sizes.

    Held, because the two counters are extrapolated apart by Prometheus and, during a
    rollout, pods that predate the series add steps without sizes.
    """
    summed = sizes.get(cell, 0.0)
    bucket = bucket_index(cell[0])
    if summed <= 0 or count <= 0 or bucket is None:
        return None
    lo, hi = bucket_bounds(bucket)
    if lo > top:
        return None
    return min(max(summed / count, float(lo)), float(min(hi, top)))


def cell_ratios(
    step_times: Mapping[Cell, StepTimes],
    model: StepCostModel,
    *,
    max_batch_size: int,
    batch_sizes: Mapping[Cell, float] | None = None,
) -> list[CellRatio]:
    """A ratio per observed cell the profile can price (its K measured, inside its sizes).

    The profile prices a cell at its mean batch size where the pods export it
    (``batch_sizes``: a cell's sizes summed, ``PoolWindow.step_batch_sizes``), at the
    bucket's middle otherwise: steps at batch 256 priced at 192 read as a slower machine.
    """
    out = []
    for (label, k), times in sorted(step_times.items()):
        bucket = bucket_index(label)
        if bucket is None or k not in model.columns or times.count <= 0:
            continue
        mean = cell_mean_size(batch_sizes or {}, (label, k), times.count, max_batch_size)
        middle = mean if mean is not None else min(bucket_middle(bucket), float(max_batch_size))
        _, v = model.base(middle, k)
        predicted = model.itl_ms(middle, k, middle * v, middle * model.reference_context)
        live = times.mean_ms
        if predicted > 0 and math.isfinite(live) and live > 0:
            out.append(CellRatio(bucket, k, live / predicted, times.count))
    return out


def pooled_ratio(ratios: Sequence[CellRatio], min_steps: float) -> tuple[float | None, float]:
    """Step-weighted geometric mean ratio over cells with ``min_steps`` steps, and their steps."""
    usable = [r for r in ratios if r.steps >= min_steps]
    steps = sum(r.steps for r in usable)
    if steps <= 0:
        return None, 0.0
    log_mean = sum(r.steps * math.log(r.ratio) for r in usable) / steps
    return math.exp(log_mean), steps


def itl_scale(ratios: Sequence[CellRatio], rows: int, settings: TelemetrySettings) -> FloatArray:
    """Per batch size 0..rows-1, the step-time scale the table uses (1.0: the profile holds).

    Per bucket, the step-weighted log-mean ratio of its cells shrunk toward
    1.0 with ``cost_prior_steps``; a bucket not observed takes the pooled
    scale of all cells (shrunk the same way).
    """
    prior = settings.cost_prior_steps

    def shrunk(cells: Sequence[CellRatio]) -> float:
        steps = sum(c.steps for c in cells)
        log_sum = sum(c.steps * math.log(c.ratio) for c in cells)
        return math.exp(log_sum / (steps + prior)) if steps > 0 else 1.0

    overall = shrunk(ratios)
    scale = np.full(rows, overall)
    for bucket in {r.bucket for r in ratios}:
        lo, hi = bucket_bounds(bucket)
        scale[lo : min(hi, rows - 1) + 1] = shrunk([r for r in ratios if r.bucket == bucket])
    return scale


def mean_half_width(steps: float, settings: TelemetrySettings) -> float:
    """Relative 95% half-width of a mean over ``steps`` clean steps whose times vary with
    ``step_cv`` and lag-1 autocorrelation ``step_rho`` (fewer independent steps)."""
    if steps <= 0:
        return math.inf
    rho = min(max(settings.step_rho, 0.0), 0.99)
    effective = steps * (1.0 - rho) / (1.0 + rho)
    return Z95 * settings.step_cv / math.sqrt(effective)


def live_plain(window: PoolWindow, method: str, settings: TelemetrySettings) -> LivePlain | None:
    """Plain decoding's step time per batch bucket from the pods' own clean K=0 steps.

    With the add-on's plugin a K=0 step is a plain step for a stateless
    drafter (n-gram), and a plain step plus the drafter's K=0 pass for the
    drafters the add-on times (``contract.K0_PASS_DRAFTERS``, their pass in
    ``window.k0_passes``). A bucket counts with ``cost_min_steps`` K=0 steps
    and, for a timed drafter, a pass for about each of them (the two are
    counted on the same steps; a pod that does not time its pass gives none:
    one on a device other than a CPU or a CUDA GPU, or an older add-on).
    Cells with ``cost_min_steps`` steps in such a bucket get their live mean.
    None where no bucket counts or the method's K=0 step is not known to be
    plain (MTP, suffix).
    """
    timed_pass = method in K0_PASS_DRAFTERS
    if not timed_pass and method not in STATELESS_DRAFTERS:
        return None
    enough = settings.cost_min_steps
    plain_ms: dict[int, float] = {}
    steps_at: dict[int, float] = {}
    for (label, k), times in window.step_times.items():
        bucket = bucket_index(label)
        if bucket is None or k != 0 or times.count < enough:
            continue
        pass_ms = 0.0
        if timed_pass:
            passes = window.k0_passes.get(label)
            if passes is None or not 0.8 * times.count <= passes.count <= 1.25 * times.count:
                continue
            pass_ms = passes.mean_ms
        plain = times.mean_ms - pass_ms
        if math.isfinite(plain) and plain > 0:
            plain_ms[bucket], steps_at[bucket] = plain, times.count
    if not plain_ms:
        return None
    cells: dict[tuple[int, int], float] = {}
    half: dict[tuple[int, int], float] = {}
    for (label, k), times in window.step_times.items():
        bucket = bucket_index(label)
        if bucket is None or bucket not in plain_ms or times.count < enough:
            continue
        cells[(bucket, k)] = times.mean_ms
        remainder = settings.live_plain_remainder_ms / plain_ms[bucket]
        # K=0: the plain step is this cell's own steps less their pass, so their noise
        # cancels; another K's mean and the plain one are two samples.
        sampling = 0.0 if k == 0 else math.hypot(
            mean_half_width(steps_at[bucket], settings), mean_half_width(times.count, settings)
        )  # fmt: skip
        half[(bucket, k)] = remainder + sampling
    return LivePlain(plain_ms, cells, half)


def served_mix(window: PoolWindow, rows: int) -> dict[tuple[int, int], float]:
    """Share of clean decode steps per (batch size, K). The K are the ones the pods ran (the
    add-on's choice).

    Each (bucket, K) cell's steps go to the cell's mean batch size (the two sizes around it,
    weighted to keep the mean), where the pods export their steps' batch sizes; spread
    evenly over the bucket's sizes otherwise. Spread, a pool serving batch 256 was priced
    as if it served 129-256, where speculation wins more: R read about 5% high there.
    """
    mix: dict[tuple[int, int], float] = {}

    def add(bs: int, k: int, steps: float) -> None:
        mix[(bs, k)] = mix.get((bs, k), 0.0) + steps

    for (label, k), times in window.step_times.items():
        bucket = bucket_index(label)
        if bucket is None:
            continue
        mean = cell_mean_size(window.step_batch_sizes, (label, k), times.count, rows - 1)
        if mean is not None:
            below = math.floor(mean)
            above_share = mean - below
            add(below, k, times.count * (1.0 - above_share))
            if above_share > 0:
                add(below + 1, k, times.count * above_share)
            continue
        lo, hi = bucket_bounds(bucket)
        spread = [bs for bs in range(lo, hi + 1) if bs < rows] or [rows - 1]
        for bs in spread:
            add(bs, k, times.count / len(spread))
    return mix


def batch_weights(window: PoolWindow, rows: int) -> dict[int, float]:
    """Share of clean decode steps per batch size (``served_mix`` summed over K)."""
    weights: dict[int, float] = {}
    for (bs, _), steps in served_mix(window, rows).items():
        weights[bs] = weights.get(bs, 0.0) + steps
    return weights
