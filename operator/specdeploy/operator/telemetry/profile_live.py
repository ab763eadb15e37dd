"""A SpeculationProfile's ``status.live``: what every pool serving with it saw, merged. Pure.

Step cost is a property of the hardware, so every pool that serves with a
profile tells something about it, whichever deployment it belongs to; the
view here sums their recorded counts (each pool's ``status.pools[].live``,
written by its reconcile) and marks the profile ``Stale`` (reason
``CostDrift``) while any of them reports sustained cost drift against this
profile's content. It is computed from the deployments' recorded views, so
it changes only when one of them did, and is rewritten only when the merged
estimate moved (``view_moved``: acceptance or cost beyond the record
tolerance, another set of sources, drift): counts that only grew do not
cost a write, so a quiet or steady interval writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specdeploy.operator.api import Condition, ConditionStatus
from specdeploy.operator.conditions import merge_conditions
from specdeploy.operator.manifests import merge_patch
from specdeploy.operator.telemetry.assess import read_live
from specdeploy.operator.telemetry.estimate import half_width
from specdeploy.operator.telemetry.settings import TelemetrySettings

STALE = "Stale"
ProfileKey = tuple[str, str]
"""(namespace, profile name)."""


def _sum(rows: Sequence[Sequence[int]]) -> list[int]:
    width = max((len(r) for r in rows), default=0)
    return [sum(r[i] for r in rows if i < len(r)) for i in range(width)]


def contributions(bodies: Iterable[Mapping[str, Any]]) -> dict[ProfileKey, list[tuple[str, Any]]]:
    """Per profile, (``deployment/gpuType``, recorded live view) of every pool serving with it."""
    out: dict[ProfileKey, list[tuple[str, Any]]] = {}
    for body in bodies:
        meta = body.get("metadata") or {}
        for pool in (body.get("status") or {}).get("pools") or []:
            live = read_live(pool.get("live"))
            if live is None or not pool.get("profile"):
                continue
            key = (str(meta.get("namespace")), str(pool["profile"]))
            out.setdefault(key, []).append((f"{meta.get('name')}/{pool.get('gpuType')}", live))
    return out


def merged_view(
    sources: Sequence[tuple[str, Any]], digest: str | None, settings: TelemetrySettings
) -> dict[str, Any]:
    """The profile's ``status.live``: counts summed over the sources derived from ``digest``."""
    current = sorted(
        (s for s in sources if digest is None or s[1].profile_digest == digest), key=lambda s: s[0]
    )
    reached = _sum([s[1].reached for s in current])
    accepted = _sum([s[1].accepted for s in current])
    proposed = _sum([s[1].proposed for s in current])
    steps = sum(s[1].sequence_steps for s in current)
    rates = [a / r if r > 0 else None for a, r in zip(accepted, reached, strict=True)]
    widths = [
        round(half_width(p, r, settings.design_effect), 4) if p is not None else None
        for p, r in zip(rates, reached, strict=True)
    ]
    costs = [(s[1].cost_ratio, s[1].sequence_steps) for s in current if s[1].cost_ratio is not None]
    weight = sum(w for _, w in costs)
    return {
        "sources": [name for name, _ in current],
        "windowSeconds": max((s[1].window_seconds for s in current), default=0.0),
        "sequenceSteps": steps,
        "reached": reached,
        "proposed": proposed,
        "accepted": accepted,
        "perPosition": [None if p is None else round(p, 4) for p in rates],
        "halfWidth": widths,
        "costRatio": round(sum(c * w for c, w in costs) / weight, 3) if weight > 0 else None,
        "costDrift": [name for name, live in current if live.cost_drift],
    }


def stale_condition(view: Mapping[str, Any]) -> Condition:
    drifting = view.get("costDrift") or []
    if drifting:
        message = (
            f"live step times left this profile's (ratio {view.get('costRatio')}) in "
            + ", ".join(drifting)
        )
        return Condition(
            type=STALE, status=ConditionStatus.TRUE, reason="CostDrift", message=message
        )
    return Condition(type=STALE, status=ConditionStatus.FALSE, reason="Current", message="")


def view_moved(old: Mapping[str, Any] | None, new: Mapping[str, Any], tolerance: float) -> bool:
    """Whether the merged view says something the recorded one does not."""
    if not old:
        return True
    if (old.get("sources"), old.get("costDrift")) != (new.get("sources"), new.get("costDrift")):
        return True
    before, after = old.get("perPosition") or [], new.get("perPosition") or []
    if len(before) != len(after):
        return True
    widths = [w or 0.0 for w in new.get("halfWidth") or []] + [0.0] * len(after)
    pairs = [*zip(before, after, widths[: len(after)], strict=True)]
    pairs.append((old.get("costRatio"), new.get("costRatio"), 0.0))
    for a, b, width in pairs:  # a move within the new estimate's interval is noise
        if (a is None) != (b is None) or (
            a is not None and b is not None and abs(a - b) > max(tolerance, width)
        ):
            return True
    return False


def status_patch(
    profile: Mapping[str, Any],
    view: Mapping[str, Any],
    *,
    now: str,
    tolerance: float = 0.0,
) -> dict[str, Any] | None:
    """The merge patch of the profile's status (None: nothing to change, or a view that
    did not move beyond ``tolerance`` from the recorded one)."""
    old = dict(profile.get("status") or {})
    if not view_moved(old.get("live"), view, tolerance):
        view = old["live"]
    generation = int((profile.get("metadata") or {}).get("generation") or 1)
    conditions = merge_conditions(
        [c for c in old.get("conditions") or [] if c.get("type") == STALE],
        [stale_condition(view)],
        now=now,
        generation=generation,
    )
    others = [c for c in old.get("conditions") or [] if c.get("type") != STALE]
    new = {
        **old,
        "live": dict(view),
        "conditions": others
        + [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions],
    }
    patch = merge_patch(old, new)
    return patch or None
