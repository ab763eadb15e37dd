"""The live floor stage: roll a pool to plain decoding when live evidence says speculation
loses, and speculate again when its canary's evidence says it wins. Pure.

The profile's floor (``floor``) judges before any traffic; this stage judges
the traffic. Its evidence is R (``runtime.floor.live_ratio``, computed by the
live stage once per telemetry window): the throughput of what the pods ran
(the (batch size, K) mix of their steps: the add-on's K, not the table's)
over plain decoding's at the batch-size mix the pool served, with a 95%
interval. It acts only with ``spec.speculation.fallback: vanilla`` on pools
with a profile (policies ``adaptive`` and ``table``), and only on:

- **evidence that holds**: R's upper bound below ``1 - margin`` for
  ``losing_windows`` consecutive windows (a reconcile without a new window
  neither extends nor breaks the streak);
- **a regime worth a restart**: the streak has lasted at least
  ``restart_seconds / loss``, the dwell at which a restart pays for itself
  if the regime goes on as long again;
- **a flip budget**: at most ``max_flips_per_hour`` state changes in any hour.

In state ``plain`` the pool's Deployment runs without ``--speculative-config``
(its pods run no add-on and export no acceptance) and one canary replica,
surged beside it (``children``), keeps speculating with the add-on and the
pool's table. The canary's windows give R again: its lower bound above
``1 + margin`` for ``winning_windows`` windows in a row brings the pool back
(the same flip budget). With the Service spreading requests evenly, the
canary sees about the batch sizes each plain replica does. A surged canary is
also the answer for a pool of one replica: it costs one GPU while the pool is
plain, none of the pool's own. Where no GPU is free the canary's pod stays
Pending and sends nothing; after ``probe_after_seconds`` without a canary
window a timed probe speculates again with the whole pool and is judged
afresh. The rollouts surge (``maxSurge: 1``, ``maxUnavailable: 0`` in
``builders.deployment``), so no serving capacity is lost while pods restart;
where no GPU is free for the surged pod the rollout waits, the old pods
serving meanwhile (``status.pools[].state`` says RollingOut).

The state lives in ``status.pools[].floor`` (it survives an operator
restart) and is rewritten only when it moves: a quiet window writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from specdeploy.operator.api import Fallback, FloorState, PoolFloor
from specdeploy.operator.config import FloorSettings, seconds_between, window_start
from specdeploy.operator.naming import label_value
from specdeploy.operator.pool import plain_reference
from specdeploy.operator.pool.context import Context
from specdeploy.operator.pool.pools import Pool
from specdeploy.operator.pool.table import ServedTable
from specdeploy.operator.telemetry.window import PoolWindow
from specdeploy.runtime.floor import LiveRatio

HOUR_S = 3600.0
RATIO_TOLERANCE = 0.01
"""R moving less than this (and nothing else moving) keeps the recorded state unwritten."""


def read_floor(raw: Mapping[str, Any] | None) -> PoolFloor | None:
    """A recorded floor state from status; None when absent or not of this version's shape."""
    if not raw:
        return None
    try:
        return PoolFloor.model_validate(raw)
    except ValidationError:
        return None


def _recent(flips: tuple[str, ...], now: str) -> tuple[str, ...]:
    """The flips of the last hour: the budget's window."""
    return tuple(t for t in flips if seconds_between(t, now) < HOUR_S)


def break_even_seconds(settings: FloorSettings, ratio: LiveRatio) -> float:
    """How long a losing streak must already have lasted for a restart to pay (inf: no loss)."""
    loss = 1.0 - ratio.ratio
    return settings.restart_seconds / loss if loss > 0 else math.inf


def _applies(ctx: Context, served: ServedTable) -> bool:
    if ctx.spec.speculation.fallback is not Fallback.VANILLA or served.profile is None:
        return False
    return not (served.verdict is not None and served.verdict.loses and served.schedule is None)


def _plain(served: ServedTable, floor: PoolFloor) -> ServedTable:
    """Plain decoding: no schedule, no base, so the pool's Deployment drops speculation;
    the table it had goes to the canary."""
    return replace(
        served,
        schedule=None,
        base=None,
        floor=floor,
        canary=served.schedule,
        canary_base=served.base,
    )


def _shown(ratio: LiveRatio) -> str:
    return f"R {ratio.ratio:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] of plain decoding"


def _canary_judged(
    settings: FloorSettings, before: PoolFloor, ratio: LiveRatio, now: str
) -> PoolFloor:
    """The plain state after one more canary window: back to speculating on a win that holds."""
    flips = _recent(before.flips, now)
    winning = ratio.low > 1.0 + settings.margin
    streak = before.winning_windows + 1 if winning else 0
    fields: dict[str, Any] = {
        "ratio": ratio.ratio,
        "ratio_low": ratio.low,
        "ratio_high": ratio.high,
        "batch_sizes": ratio.sizes,
        "winning_windows": streak,
        "canary_at": now,
        "flips": flips,
    }
    shown = f"canary {_shown(ratio)}"
    if winning and streak >= settings.winning_windows:
        if len(flips) < settings.max_flips_per_hour:
            return PoolFloor(
                state=FloorState.SPECULATING,
                **{
                    k: v
                    for k, v in fields.items()
                    if k not in ("winning_windows", "canary_at", "flips")
                },
                since=now,
                flips=(*flips, now),
                reason=f"{shown} for {streak} windows: speculating again",
            )
        reason = f"{shown}, winning; {len(flips)} flips in the last hour: staying plain"
    elif winning:
        reason = f"{shown}, winning for {streak}/{settings.winning_windows} windows"
    else:
        reason = f"{shown}: plain decoding holds"
    return before.model_copy(update={**fields, "reason": reason})


def _while_plain(ctx: Context, served: ServedTable, before: PoolFloor) -> ServedTable:
    settings, now = ctx.config.floor, ctx.now
    ratio = served.ratio
    if ratio is not None and served.schedule is not None:  # the canary's window
        after = _canary_judged(settings, before, ratio, now)
        if not _moved(before, after, refresh_s=settings.probe_after_seconds / 4):
            after = before
        return (
            replace(served, floor=after)
            if after.state is FloorState.SPECULATING
            else (_plain(served, after))
        )
    flips = _recent(before.flips, now)
    dwell = seconds_between(before.canary_at or before.since, now)
    if dwell < settings.probe_after_seconds:
        kept = before if flips == before.flips else before.model_copy(update={"flips": flips})
        return _plain(served, kept)
    if len(flips) >= settings.max_flips_per_hour:
        reason = (
            f"probe due: no canary window for {dwell:.0f} s; waiting: "
            f"{len(flips)} flips in the last hour"
        )
        return _plain(served, before.model_copy(update={"flips": flips, "reason": reason}))
    probing = PoolFloor(
        state=FloorState.SPECULATING,
        since=now,
        flips=(*flips, now),
        reason=(
            f"probe: no canary window for {dwell:.0f} s of plain decoding (its pod not "
            "scheduled?); speculating again to measure R"
        ),
    )
    return replace(served, floor=probing)


def _judged(
    settings: FloorSettings,
    before: PoolFloor,
    ratio: LiveRatio,
    now: str,
    window_s: float,
    window: PoolWindow | None = None,
) -> PoolFloor:
    """The speculating state after one more window's R, or the plain reference's A/B where
    one has enough windows (``plain_reference``)."""
    flips = _recent(before.flips, now)
    before, ab = plain_reference.advance(settings, before, ratio, window, now, window_s)
    evidence = ab or ratio
    margin = settings.reference_margin if ab is not None else settings.margin
    losing = evidence.high < 1.0 - margin
    streak = before.losing_windows + 1 if losing else 0
    started = before.losing_since if losing and before.losing_since else None
    if losing and started is None:
        started = window_start(now, window_s)
        if ab is not None and before.undecided_since is not None:
            # The A/B pools the windows since R went undecided: the same traffic all along,
            # so the regime's age (what the break-even is judged on) counts from there.
            started = min(started, before.undecided_since)
    ratio = evidence
    shown = _shown(ratio) if ab is None else f"plain reference A/B {_shown(ratio)}"
    fields: dict[str, Any] = {
        "ratio": ratio.ratio,
        "ratio_low": ratio.low,
        "ratio_high": ratio.high,
        "batch_sizes": ratio.sizes,
        "losing_windows": streak,
        "losing_since": started,
        "flips": flips,
    }
    if not losing:
        held = f"{shown}: speculation holds"
        if before.reference_since is not None:
            n = len(before.reference_ratios)
            held += f"; a plain reference replica measures ({n} windows of A/B)"
        elif before.undecided_windows:
            held += f"; undecided for {before.undecided_windows} windows"
        return before.model_copy(update={**fields, "reason": held})
    age = seconds_between(started, now)
    needed = break_even_seconds(settings, ratio)
    if streak < settings.losing_windows:
        reason = f"{shown}, losing for {streak}/{settings.losing_windows} windows"
    elif age < needed:
        reason = (
            f"{shown}, losing for {age:.0f} s; a restart pays after {needed:.0f} s "
            f"({settings.restart_seconds:.0f} s restart / {1 - ratio.ratio:.3f} loss)"
        )
    elif len(flips) >= settings.max_flips_per_hour:
        reason = f"{shown}, losing; {len(flips)} flips in the last hour: staying"
    else:
        return PoolFloor(
            state=FloorState.PLAIN,
            **{**fields, "flips": (*flips, now)},
            since=now,
            reason=(
                f"{shown} for {streak} windows ({age:.0f} s): plain decoding, one canary "
                "replica speculating"
            ),
        )
    return before.model_copy(update={**fields, "reason": reason})


def _moved(before: PoolFloor, after: PoolFloor, refresh_s: float = 0.0) -> bool:
    """Whether status must be rewritten: anything but R's small moves, and the canary's
    last window time only once it is ``refresh_s`` old (what the probe's clock needs)."""
    quiet = {"ratio", "ratio_low", "ratio_high", "reason", "batch_sizes", "canary_at"}
    fields = [f for f in PoolFloor.model_fields if f not in quiet]
    if any(getattr(before, f) != getattr(after, f) for f in fields):
        return True
    if before.canary_at != after.canary_at and (
        before.canary_at is None
        or after.canary_at is None
        or seconds_between(before.canary_at, after.canary_at) >= refresh_s
    ):
        return True
    for a, b in ((before.ratio, after.ratio), (before.ratio_high, after.ratio_high)):
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and abs(a - b) > RATIO_TOLERANCE:
            return True
    return False


def with_live_floor(ctx: Context, pool: Pool, served: ServedTable) -> ServedTable:
    """The table after the live floor: unchanged, or none (plain decoding), with the state."""
    if not _applies(ctx, served):
        return served
    previous = ctx.previous.get(pool.gpu_type) or {}
    before = read_floor(previous.get("floor"))
    if before is not None and before.state is FloorState.PLAIN:
        return _while_plain(ctx, served, before)
    ratio = served.ratio
    if served.schedule is None or ratio is None:
        return replace(served, floor=before)  # no new window: nothing judged, nothing written
    window = ctx.windows.get(label_value(pool.gpu_type))
    window_s = window.window_seconds if window is not None else 0.0
    after = _judged(ctx.config.floor, before or PoolFloor(), ratio, ctx.now, window_s, window)
    if before is not None and not _moved(before, after):
        after = before
    if after.state is FloorState.PLAIN:
        return _plain(served, after)
    return replace(served, floor=after)


__all__ = ["break_even_seconds", "read_floor", "with_live_floor"]
