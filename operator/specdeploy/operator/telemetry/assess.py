"""One pool's live view from its window, its previous view and its profile. Pure.

Called by the ordinary reconcile (the pool's live stage, ``pool.live``) with the
window the telemetry loop handed over, if any:

1. no window (no interval yet, Prometheus down, series stale or missing):
   the previous view stays exactly as recorded, so the table in force is
   frozen and status is not rewritten;
2. a profile with other content than the view was derived from (it was
   re-profiled): the old view is dropped;
3. otherwise: live acceptance (``estimate``), the cost ratio and its drift
   streak (``drift``), a candidate schedule from live acceptance and the
   live-corrected cost model (``specdeploy.runtime.live``) over the K the
   pods run. The candidate replaces the table in force only when the
   estimate is confident, no re-profiling is under way, and it predicts
   more than ``push_margin`` over it: no thrashing;
4. the new view is recorded only when it moved (the schedule, a flag, the
   streak, or acceptance or cost beyond ``record_tolerance``): a quiet
   interval writes nothing.

Beside the view it returns the goodput grid it priced schedules with: the
pool's one live cost model for this reconcile, which scaling reuses. With no
window it is the recorded view's (its acceptance and its pooled cost ratio,
the only correction a view records). With a window it also returns R, what
the pods ran (the window's (batch size, K) mix) against plain decoding at
that mix, with its interval (``runtime.floor.live_ratio``): the live floor's
evidence, one value per window. Plain decoding's step is the pods' own where
their K=0 steps give it (``estimate.live_plain``), else the profile's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from specdeploy.operator.api import LiveSource, PoolLive
from specdeploy.operator.manifests import content_hash
from specdeploy.operator.telemetry.drift import CostStreak, acceptance_drifted, next_streak
from specdeploy.operator.telemetry.estimate import (
    AcceptanceEstimate,
    batch_weights,
    cell_ratios,
    estimate_acceptance,
    itl_scale,
    live_plain,
    pooled_ratio,
    served_mix,
)
from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.operator.telemetry.window import PoolWindow
from specdeploy.runtime.floor import LiveRatio, live_ratio
from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.live import derive_live_schedule, live_goodput_grid, predicted_gain
from specdeploy.runtime.profile import ProfileSpec, SpeculationProfile
from specdeploy.runtime.ranges import Range, format_schedule, schedule_problems
from specdeploy.runtime.schedule import cost_model, grid_rows


def profile_digest(document: SpeculationProfile) -> str:
    """The profile's content, hashed: a live view derived from other content is void."""
    return content_hash(document.to_document()["spec"])[:12]


def read_live(raw: Mapping[str, Any] | None) -> PoolLive | None:
    """A recorded view from status; None when absent or not of this version's shape."""
    if not raw:
        return None
    try:
        return PoolLive.model_validate(raw)
    except ValidationError:
        return None  # an older operator's shape: re-derived at the next interval


@dataclass(frozen=True)
class PoolInputs:
    """What one pool's assessment reads."""

    profile: ProfileSpec
    digest: str
    """The profile content's hash: a view derived from another content is void."""
    base: tuple[Range, ...]
    """The profile's schedule (usable with this maxK): the table without telemetry."""
    allowed_k: tuple[int, ...]
    """The K the pods run (their CUDA-graph shapes): a table may use no other."""
    previous: PoolLive | None
    window: PoolWindow | None
    now: str


def in_force(inputs: PoolInputs) -> tuple[Range, ...]:
    """The schedule the pool serves now: the recorded live one when valid, else the profile's."""
    prev = inputs.previous
    if prev is None or prev.source is not LiveSource.LIVE or not prev.schedule_ranges:
        return inputs.base
    if prev.profile_digest != inputs.digest:
        return inputs.base  # derived from other profile content
    ranges = tuple(tuple(r) for r in prev.schedule_ranges)
    max_k = inputs.profile.fingerprint.max_k
    bad = list(schedule_problems(ranges, max_k=max_k))
    if bad or any(r[2] not in inputs.allowed_k for r in ranges):
        return inputs.base  # never serve a table vLLM or the pods would refuse
    return ranges  # type: ignore[return-value]


def _prior(spec: ProfileSpec) -> list[float]:
    n = spec.fingerprint.max_k
    rates = list(spec.acceptance.per_position)[:n]
    return rates + [0.0] * (n - len(rates))


def _moved(before: PoolLive, after: PoolLive, tolerance: float) -> bool:
    flags = ("confident", "cost_drift_intervals", "cost_drift", "acceptance_drift", "source")
    if any(getattr(before, f) != getattr(after, f) for f in flags):
        return True
    if before.schedule_ranges != after.schedule_ranges:
        return True
    if len(before.per_position) != len(after.per_position):
        return True
    widths = list(after.half_width) + [0.0] * len(after.per_position)
    if any(
        abs(a - b) > max(tolerance, w)
        for a, b, w in zip(before.per_position, after.per_position, widths, strict=False)
    ):  # a move within the new estimate's own interval is noise, not news
        return True
    a, b = before.cost_ratio, after.cost_ratio
    return (a is None) != (b is None) or (
        a is not None and b is not None and abs(a - b) > tolerance
    )


def _rounded(values: Sequence[float], digits: int = 4) -> tuple[float, ...]:
    return tuple(round(float(v), digits) for v in values)


def _record(
    inputs: PoolInputs,
    estimate: AcceptanceEstimate,
    *,
    ratio: float | None,
    streak: CostStreak,
    drifted: bool,
    schedule: tuple[Range, ...],
    source: LiveSource,
    gain: float | None,
) -> PoolLive:
    window = inputs.window
    assert window is not None
    verified = window.verified_per_sequence
    return PoolLive(
        observed_at=inputs.now,
        window_seconds=window.window_seconds,
        profile_digest=inputs.digest,
        sequence_steps=round(window.sequence_steps),
        reached=tuple(round(v) for v in estimate.reached),
        proposed=tuple(round(v) for v in estimate.proposed),
        accepted=tuple(round(v) for v in estimate.accepted),
        per_position=_rounded(estimate.per_position),
        half_width=_rounded(estimate.half_width),
        drafting_rate=None
        if estimate.drafting_rate[0] is None
        else round(estimate.drafting_rate[0], 4),
        confident=estimate.confident,
        verified_per_sequence=None if verified is None else round(verified, 3),
        requests_per_second=None
        if window.requests_per_second is None
        else round(window.requests_per_second, 3),
        cost_ratio=None if ratio is None else round(ratio, 3),
        cost_drift_intervals=streak.intervals,
        cost_drift=streak.sustained,
        acceptance_drift=drifted,
        source=source,
        schedule=format_schedule(schedule) if source is LiveSource.LIVE else None,
        schedule_ranges=schedule if source is LiveSource.LIVE else None,
        predicted_gain=None if gain is None else round(gain, 4),
    )


@dataclass(frozen=True)
class Assessment:
    """The pool's live view after this interval, and the cost model it was priced with."""

    view: PoolLive | None
    goodput: FloatArray | None
    """Goodput per (batch size, K) from live acceptance and live step times (None: no view)."""
    ratio: LiveRatio | None = None
    """R of what the pods ran over plain decoding at this window's (batch size, K) mix
    (None: no window, no baseline in the profile, or no clean decode step in the window)."""


def recorded_grid(spec: ProfileSpec, view: PoolLive) -> FloatArray:
    """The goodput grid a recorded view stands for: its acceptance, its pooled cost ratio."""
    per_position = view.per_position or spec.acceptance.per_position
    scale = None
    if view.cost_ratio is not None and view.cost_ratio > 0:
        scale = np.full(grid_rows(spec), float(view.cost_ratio))
    return live_goodput_grid(spec, per_position, scale)


def assess_pool(inputs: PoolInputs, settings: TelemetrySettings) -> Assessment:
    """The pool's live view after this interval, and its cost model (module docstring)."""
    previous = inputs.previous
    if previous is not None and previous.profile_digest != inputs.digest:
        previous = None
        inputs = PoolInputs(**{**inputs.__dict__, "previous": None})
    window = inputs.window
    if window is None:
        if previous is None:
            return Assessment(None, None)
        return Assessment(previous, recorded_grid(inputs.profile, previous))
    spec = inputs.profile
    prior = _prior(spec)
    estimate = estimate_acceptance(window, prior, settings)
    rows = grid_rows(spec)
    ratios = cell_ratios(
        window.step_times,
        cost_model(spec),
        max_batch_size=rows - 1,
        batch_sizes=window.step_batch_sizes,
    )
    ratio, _ = pooled_ratio(ratios, settings.cost_min_steps)
    before = CostStreak(previous.cost_drift_intervals, previous.cost_drift) if previous else None
    streak = next_streak(before or CostStreak(), ratio, settings)
    scale = itl_scale(ratios, rows, settings)
    goodput = live_goodput_grid(spec, estimate.per_position, scale)
    served = batch_weights(window, rows)
    weights = served or {m.batch_size: 1.0 for m in spec.measurements}
    current = in_force(inputs)
    candidate = tuple(derive_live_schedule(spec, goodput, inputs.allowed_k))
    push = (
        estimate.confident
        and not streak.sustained
        and candidate != current
        and predicted_gain(goodput, candidate, current, weights) > settings.push_margin
    )
    schedule = candidate if push else current
    live = push or (previous is not None and previous.source is LiveSource.LIVE)
    source = LiveSource.LIVE if live else LiveSource.PROFILE
    gain = predicted_gain(goodput, schedule, inputs.base, weights) if live else None
    drifted = acceptance_drifted(estimate, prior, settings)
    record = _record(
        inputs,
        estimate,
        ratio=ratio,
        streak=streak,
        drifted=drifted,
        schedule=schedule,
        source=source,
        gain=gain,
    )
    floor = live_ratio(
        spec,
        per_position=estimate.per_position,
        half_width=estimate.half_width,
        itl_scale=scale,
        mix=served_mix(window, rows),
        timed=live_plain(window, spec.fingerprint.method, settings),
    )
    if previous is not None and not _moved(previous, record, settings.record_tolerance):
        return Assessment(previous, goodput, floor)
    return Assessment(record, goodput, floor)
