"""Status from pool outcomes: phase, conditions, per-pool summary, and the Events of a transition.

Everything here is a pure function of (old status, new facts, clock value).
A condition's ``lastTransitionTime`` moves only when its status does, and no
message carries a time or a counter that changes by itself, so a reconcile
with nothing new produces the very same status and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdeploy.operator.api import (
    Condition,
    FloorState,
    Phase,
    SpeculativeDeploymentStatus,
)
from specdeploy.operator.conditions import condition, merge_conditions
from specdeploy.operator.pool.context import PoolOutcome, Profiling

VALID, PROFILED, AVAILABLE, PROGRESSING = "Valid", "Profiled", "Available", "Progressing"
PROFILING_FAILED = "ProfilingFailed"
"""The Profiled condition's reason when a pool's profiling failed (its message names it)."""
BENEFICIAL = "SpeculationBeneficial"
_BAD = (Phase.FAILED, Phase.DEGRADED)


def overall_phase(states: Sequence[Phase]) -> Phase:
    """Ready when every pool is; Failed when all fail; Degraded when some do."""
    if not states:
        return Phase.PENDING
    if all(s is Phase.READY for s in states):
        return Phase.READY
    if all(s is Phase.FAILED for s in states):
        return Phase.FAILED
    if any(s in _BAD for s in states):
        return Phase.DEGRADED
    for phase in (Phase.PROFILING, Phase.ROLLING_OUT):
        if phase in states:
            return phase
    return Phase.PENDING


def _pools_message(outcomes: Sequence[PoolOutcome], wanted: Profiling) -> str:
    return "; ".join(
        f"{o.status.gpu_type}: {o.status.message}" for o in outcomes if o.profiling is wanted
    )


def names_pool(message: str, gpu_type: str) -> bool:
    """Whether a pools message of the Profiled condition (``_pools_message``: "<gpuType>:
    <pool message>" per pool, joined by "; ") names this pool."""
    head = f"{gpu_type}: "
    return message.startswith(head) or f"; {head}" in message


def profiled_condition(outcomes: Sequence[PoolOutcome]) -> Condition:
    if not outcomes:
        return condition(PROFILED, None, "NoPools", "no pool to profile")
    for state, reason in (
        (Profiling.FAILED, PROFILING_FAILED),
        (Profiling.MISSING, "ProfileMissing"),
        (Profiling.RUNNING, "Profiling"),
    ):
        if any(o.profiling is state for o in outcomes):
            return condition(PROFILED, False, reason, _pools_message(outcomes, state))
    return condition(PROFILED, True, "ProfilesReady", "every pool has its K table")


def available_condition(outcomes: Sequence[PoolOutcome]) -> Condition:
    if not outcomes:
        return condition(AVAILABLE, False, "NoPools", "no GPU type found for any pool")
    down = [o.status.gpu_type for o in outcomes if o.status.ready_replicas < 1]
    if down:
        return condition(
            AVAILABLE, False, "PoolsUnavailable", "no ready replica in " + ", ".join(down)
        )
    return condition(AVAILABLE, True, "PoolsAvailable", "every pool has a ready replica")


def beneficial_condition(outcomes: Sequence[PoolOutcome]) -> Condition:
    """Whether speculation beats plain decoding: live evidence first (a pool the live
    floor rolled to plain decoding), then where the profiles can tell."""
    plain = [
        (o.status.gpu_type, o.status.floor)
        for o in outcomes
        if o.status.floor is not None and o.status.floor.state is FloorState.PLAIN
    ]
    if plain:
        detail = "; ".join(f"{gpu}: {floor.reason}" for gpu, floor in plain)
        return condition(BENEFICIAL, False, "LiveFloorPlain", detail)
    judged = [o for o in outcomes if o.verdict is not None and o.verdict.gain is not None]
    if not judged:
        return condition(BENEFICIAL, None, "NoBaseline", "no profile measured plain decoding")
    losing = [o for o in judged if o.verdict is not None and o.verdict.loses]
    if losing:
        detail = "; ".join(
            f"{o.status.gpu_type}: {o.verdict.gain:.2f}x plain decoding"
            + ("" if o.status.speculating else ", runs plain decoding")
            for o in losing
            if o.verdict is not None and o.verdict.gain is not None
        )
        return condition(BENEFICIAL, False, "SpeculationLoses", detail)
    gains = ", ".join(
        f"{o.status.gpu_type}: {o.verdict.gain:.2f}x"
        for o in judged
        if o.verdict is not None and o.verdict.gain is not None
    )
    return condition(BENEFICIAL, True, "SpeculationGains", f"over plain decoding: {gains}")


def progressing_condition(phase: Phase) -> Condition:
    if phase in (Phase.PROFILING, Phase.ROLLING_OUT):
        return condition(PROGRESSING, True, phase.value)
    if phase is Phase.READY:
        return condition(PROGRESSING, False, "Complete")
    return condition(PROGRESSING, False, phase.value)


def compose(
    *,
    old: Mapping[str, Any] | None,
    outcomes: Sequence[PoolOutcome],
    generation: int,
    now: str,
    endpoint: str | None = None,
    extra: Sequence[Condition] = (),
) -> SpeculativeDeploymentStatus:
    """The status of a valid deployment from its pools' outcomes; ``endpoint`` the
    in-cluster URL of its Service (None while the Service is not the operator's),
    ``extra`` the telemetry loop's conditions."""
    phase = overall_phase([o.status.state for o in outcomes])
    conditions = [
        condition(VALID, True, "Valid", "spec accepted"),
        profiled_condition(outcomes),
        available_condition(outcomes),
        progressing_condition(phase),
        beneficial_condition(outcomes),
        *extra,
    ]
    return SpeculativeDeploymentStatus(
        phase=phase,
        observed_generation=generation,
        conditions=merge_conditions(
            (old or {}).get("conditions") or [], conditions, now=now, generation=generation
        ),
        pools=tuple(o.status for o in outcomes),
        replicas=sum(o.status.replicas for o in outcomes),
        ready_replicas=sum(o.status.ready_replicas for o in outcomes),
        endpoint=endpoint,
    )


def invalid(
    *, old: Mapping[str, Any] | None, reason: str, message: str, generation: int, now: str
) -> SpeculativeDeploymentStatus:
    """The status of a deployment whose spec was rejected: Failed, Valid=False, no pools."""
    conditions = [condition(VALID, False, reason, message), progressing_condition(Phase.FAILED)]
    return SpeculativeDeploymentStatus(
        phase=Phase.FAILED,
        observed_generation=generation,
        conditions=merge_conditions(
            (old or {}).get("conditions") or [], conditions, now=now, generation=generation
        ),
    )


def to_wire(status: SpeculativeDeploymentStatus) -> dict[str, Any]:
    wire: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return wire


# --- Events --------------------------------------------------------------


@dataclass(frozen=True)
class EventSpec:
    """An Event to record on the deployment: ``type`` is Normal or Warning."""

    type: str
    reason: str
    message: str


def _pool_states(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(p.get("gpuType")): p for p in (status or {}).get("pools") or []}


def _condition_of(status: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


TELEMETRY_CONDITIONS = ("TelemetryHealthy", "TablesCurrent")
"""Conditions whose every change of status or reason is an Event (drift, Prometheus trouble)."""


def _condition_events(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[EventSpec]:
    events = []
    for kind in TELEMETRY_CONDITIONS:
        now, before = _condition_of(new, kind), _condition_of(old, kind)
        key = (now.get("status"), now.get("reason"))
        if not now or key == (before.get("status"), before.get("reason")):
            continue
        if before or now.get("status") == "False":
            level = "Warning" if now.get("status") == "False" else "Normal"
            events.append(EventSpec(level, str(now["reason"]), f"{kind}: {now.get('message', '')}"))
    return events


def _live_events(
    old_pools: Mapping[str, Mapping[str, Any]], gpu: str, pool: Mapping[str, Any]
) -> list[EventSpec]:
    """A pool's table re-derived from live telemetry, its live floor's state or plain
    reference changed, or its re-profiling begun."""
    live, before = pool.get("live") or {}, old_pools.get(gpu, {}).get("live") or {}
    events = []
    if live.get("schedule") and live.get("schedule") != before.get("schedule"):
        gain = live.get("predictedGain")
        why = "acceptance drift" if live.get("acceptanceDrift") else "live telemetry"
        detail = f", predicted {gain:+.1%} over the profile's" if isinstance(gain, float) else ""
        old_table = before.get("schedule") or "the profile's"
        message = f"pool {gpu}: table {old_table} -> {live['schedule']} ({why}{detail})"
        events.append(EventSpec("Normal", "LiveTable", message))
    floor, was = pool.get("floor") or {}, old_pools.get(gpu, {}).get("floor") or {}
    state, prior = floor.get("state"), was.get("state") or FloorState.SPECULATING.value
    if state is not None and state != prior:
        plain = state == FloorState.PLAIN.value
        reason = "PlainDecoding" if plain else "SpeculationResumed"
        events.append(
            EventSpec("Warning" if plain else "Normal", reason, f"pool {gpu}: {floor['reason']}")
        )
    reference, had = floor.get("referenceSince"), was.get("referenceSince")
    if reference and not had:
        message = f"pool {gpu}: {floor.get('reason', '')}; one plain reference replica surged"
        events.append(EventSpec("Normal", "PlainReference", message))
    elif had and not reference and state != FloorState.PLAIN.value:
        message = f"pool {gpu}: the plain reference ended: {floor.get('reason', '')}"
        events.append(EventSpec("Normal", "PlainReferenceEnded", message))
    if live.get("costDrift") and not before.get("costDrift"):
        message = (
            f"pool {gpu}: live step times {live.get('costRatio')}x the profile's for "
            f"{live.get('costDriftIntervals')} intervals: re-profiling, "
            "the old table serves meanwhile"
        )
        events.append(EventSpec("Warning", "CostDrift", message))
    return events


def transition_events(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[EventSpec]:
    """One Event per transition: the spec rejected, the phase, each pool's state, telemetry's."""
    events = []
    valid = _condition_of(new, VALID)
    if valid.get("status") == "False" and _condition_of(old, VALID) != valid:
        events.append(EventSpec("Warning", str(valid["reason"]), str(valid.get("message", ""))))
    before = (old or {}).get("phase")
    if new.get("phase") != before:
        kind = "Warning" if new.get("phase") in (Phase.FAILED, Phase.DEGRADED) else "Normal"
        events.append(
            EventSpec(kind, str(new["phase"]), f"phase {before or 'none'} -> {new['phase']}")
        )
    old_pools = _pool_states(old)
    for gpu, pool in _pool_states(new).items():
        prior = old_pools.get(gpu, {}).get("state")
        if pool.get("state") != prior:
            kind = "Warning" if pool.get("state") in (Phase.FAILED, Phase.DEGRADED) else "Normal"
            message = f"pool {gpu}: {prior or 'new'} -> {pool['state']}: {pool.get('message', '')}"
            events.append(EventSpec(kind, f"Pool{pool['state']}", message))
        events.extend(_live_events(old_pools, gpu, pool))
    events.extend(_condition_events(old, new))
    return events


APPLIED = "Applied"
REFUSAL_MESSAGE_LIMIT = 1024


def name_taken(conflict: str) -> Condition:
    """``Applied=False`` (reason ``NameTaken``): a child's name belongs to an object not
    ours, which the operator leaves alone (review M4); gone once the name is free."""
    return condition(APPLIED, False, "NameTaken", conflict[:REFUSAL_MESSAGE_LIMIT])


def with_refusals(
    status: Mapping[str, Any],
    refused: Sequence[tuple[str, str]],
    now: str,
    generation: int,
) -> dict[str, Any]:
    """``status`` with the writes the API server refused (what, its message): phase
    Degraded and ``Applied=False`` (reason ``ChildRefused``) naming each (review H4)."""
    message = "; ".join(f"{what}: {why}" for what, why in refused)[:REFUSAL_MESSAGE_LIMIT]
    refusal = condition(APPLIED, False, "ChildRefused", message)
    old = [c for c in status.get("conditions") or [] if c.get("type") == APPLIED]
    merged = merge_conditions(old, [refusal], now=now, generation=generation)
    others = [c for c in status.get("conditions") or [] if c.get("type") != APPLIED]
    return {
        **status,
        "phase": Phase.DEGRADED.value,
        "conditions": others
        + [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in merged],
    }
