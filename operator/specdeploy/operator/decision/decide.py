"""The decision: (SpeculativeDeployment, observed state) -> desired children and status.

Pure and level-triggered: it looks only at what exists now (and at the
operator's ``Memory``: the telemetry interval just read, the autoscaler's
state), never at what happened, so running it twice, after a watch restart
or after the operator's own restart, decides the same thing. Per pool it
runs ``pool.pipeline.decide_pool`` (profile state -> table -> floor ->
live -> scale -> children -> outcome); around the pools it validates the
spec, judges telemetry's health and writes the model Service and the
status.

An invalid spec gets no new children, and keeps whatever it already has:
an invalid update never takes down what serves. Manifest hashes live in
``manifests``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.common import Manifest, Parent
from specdeploy.operator.builders.service import model_service, service_endpoint
from specdeploy.operator.config import DEFAULT_CONFIG, Config
from specdeploy.operator.decision.status import (
    EventSpec,
    compose,
    invalid,
    name_taken,
    to_wire,
    transition_events,
)
from specdeploy.operator.decision.validation import validate
from specdeploy.operator.discovery import gpu_inventory
from specdeploy.operator.manifests import Ref, ref_of, with_applied_hash
from specdeploy.operator.naming import service_name
from specdeploy.operator.observed import Observed, owner_uids
from specdeploy.operator.pool.autoscale import ScaleState
from specdeploy.operator.pool.context import NO_MEMORY, Context, Memory
from specdeploy.operator.pool.outcome import conflict
from specdeploy.operator.pool.pipeline import decide_pool
from specdeploy.operator.pool.pools import plan_pools
from specdeploy.operator.telemetry.health import (
    Health,
    canary_pools,
    expected_pools,
    tables_condition,
    telemetry_health,
)
from specdeploy.operator.telemetry.interval import IntervalError, parse_interval

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    """What should exist, and what the status says.

    ``owned``: children this deployment alone controls, in their desired form.
    ``keep``: its children to leave exactly as they are (the previous table
    while re-profiling). ``shared``: children it needs that others may need
    too (profiling Jobs and their RBAC). Any child it owns that is in none of
    these is no longer wanted.
    """

    owned: tuple[Manifest, ...] = ()
    keep: frozenset[Ref] = frozenset()
    shared: tuple[Manifest, ...] = ()
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[EventSpec, ...] = ()
    scale: Mapping[str, ScaleState] = field(default_factory=dict)
    """The autoscaler's state per pool (GPU type) after this decision, for the next one."""


# --- telemetry -------------------------------------------------------------


def _previous_pools(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(p.get("gpuType")): p for p in (status or {}).get("pools") or []}


def _health(
    spec: SpeculativeDeploymentSpec,
    memory: Memory,
    previous: Mapping[str, Mapping[str, Any]],
    old_status: Mapping[str, Any] | None,
    config: Config,
) -> Health:
    try:
        interval = parse_interval(spec.telemetry.interval)
    except IntervalError:
        interval = 60.0  # the CRD's pattern admits nothing else; an old object may
    return telemetry_health(
        url=spec.telemetry.prometheus_url or config.prometheus_url,
        report=memory.telemetry,
        expected=expected_pools(spec.speculation.policy, previous),
        optional=canary_pools(spec.speculation.policy, previous),
        interval_seconds=interval,
        stale_intervals=config.telemetry.stale_intervals,
        old_conditions=(old_status or {}).get("conditions") or [],
    )


# --- the whole deployment ------------------------------------------------


def _unique(manifests: list[Manifest]) -> tuple[Manifest, ...]:
    seen: dict[Ref, Manifest] = {}
    for manifest in manifests:
        seen.setdefault(ref_of(manifest), manifest)
    return tuple(seen.values())


def _owned_refs(parent: Parent, observed: Observed) -> frozenset[Ref]:
    return frozenset(
        (kind, name)
        for kind, objects in observed.children.items()
        for name, obj in objects.items()
        if parent.uid in owner_uids(obj)
    )


def decide(
    body: Mapping[str, Any],
    observed: Observed,
    *,
    now: str,
    config: Config = DEFAULT_CONFIG,
    memory: Memory = NO_MEMORY,
) -> Decision:
    """Everything one reconcile should make true, from the object, the observed state and
    what the operator remembers (``memory``, passed beside ``observed``)."""
    parent = Parent.of(body)
    old_status = body.get("status") or None
    verdict = validate(body.get("spec"))
    if verdict.spec is None:
        first = verdict.problems[0]
        message = "; ".join(p.message for p in verdict.problems)
        status = to_wire(
            invalid(
                old=old_status,
                reason=first.reason,
                message=message,
                generation=parent.generation,
                now=now,
            )
        )
        events = tuple(transition_events(old_status, status))
        return Decision(keep=_owned_refs(parent, observed), status=status, events=events)
    spec = verdict.spec
    previous = _previous_pools(old_status)
    health = _health(spec, memory, previous, old_status, config)
    ctx = Context(
        parent,
        spec,
        observed,
        config,
        memory=memory,
        previous=previous,
        windows=health.windows,
        now=now,
    )
    pools = plan_pools(spec, gpu_inventory(observed.nodes, spec.node_selector))
    plans = [decide_pool(ctx, pool) for pool in pools]
    statuses = [p.outcome.status for p in plans]
    telemetry = (health.condition, tables_condition(statuses, health.condition))
    service = with_applied_hash(model_service(parent, name=service_name(parent.name)))
    taken = conflict(ctx, (service,))
    owned = [service] if taken is None else []
    extra = (*telemetry, name_taken(taken)) if taken is not None else telemetry
    status = to_wire(
        compose(
            old=old_status,
            outcomes=[p.outcome for p in plans],
            generation=parent.generation,
            now=now,
            endpoint=service_endpoint(parent.namespace, service_name(parent.name))
            if owned
            else None,
            extra=extra,
        )
    )
    return Decision(
        owned=_unique(owned + [m for p in plans for m in p.owned]),
        keep=frozenset(r for p in plans for r in p.keep),
        shared=_unique([m for p in plans for m in p.shared]),
        status=status,
        events=tuple(transition_events(old_status, status)),
        scale={p.outcome.status.gpu_type: p.scale for p in plans if p.scale is not None},
    )
