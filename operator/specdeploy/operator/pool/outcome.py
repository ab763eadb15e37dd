"""The outcome stage: a pool's status and its part of the decision, from what the earlier
stages found. Pure.

Three ends: a pool that cannot be placed fails; one without a usable table
waits (the previous Deployment, if any, keeps serving untouched); one with
children serves, and its state follows the Deployment's rollout (creating,
rolling out, degraded, ready). A child whose name is taken by an object
that is not ours fails the pool rather than taking the object over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.operator.api import FloorState, LiveSource, Phase, PoolStatus, ProfileSource
from specdeploy.operator.builders.common import Manifest
from specdeploy.operator.manifests import Ref, needs_apply, ref_of
from specdeploy.operator.naming import deployment_name, table_configmap_name
from specdeploy.operator.observed import owner_uids, rollout_state
from specdeploy.operator.pool.autoscale import ScaleState
from specdeploy.operator.pool.children import PoolChildren
from specdeploy.operator.pool.context import Context, PoolOutcome, Profiling, Waiting
from specdeploy.operator.pool.pools import Pool
from specdeploy.operator.pool.scaling import PoolScale
from specdeploy.operator.pool.table import ServedTable
from specdeploy.runtime.ranges import format_schedule


@dataclass(frozen=True)
class PoolPlan:
    """One pool's part of the decision: its outcome and the children it wants."""

    outcome: PoolOutcome
    owned: tuple[Manifest, ...] = ()
    keep: frozenset[Ref] = frozenset()
    shared: tuple[Manifest, ...] = ()
    scale: ScaleState | None = None
    """The autoscaler's state for the next interval (``operator`` mode), kept in memory."""


def pool_status(pool: Pool, state: Phase, message: str, **extra: Any) -> PoolStatus:
    return PoolStatus(gpu_type=pool.gpu_type, state=state, message=message, **extra)


def conflict(ctx: Context, manifests: tuple[Manifest, ...]) -> str | None:
    """Why a wanted child cannot be written: its name is taken by an object not ours."""
    for manifest in manifests:
        kind, name = ref_of(manifest)
        existing = ctx.observed.child(kind, name)
        if existing is not None and ctx.parent.uid not in owner_uids(existing):
            return f"{kind} {name} exists and does not belong to this SpeculativeDeployment"
    return None


def keep_previous(ctx: Context, pool: Pool) -> frozenset[Ref]:
    """The pool's current ConfigMap and Deployment, if any: they serve while we profile."""
    parent = ctx.parent
    refs = {
        ("Deployment", deployment_name(parent.name, pool.gpu_type)),
        ("ConfigMap", table_configmap_name(parent.name, pool.gpu_type)),
    }
    return frozenset(r for r in refs if ctx.observed.child(*r) is not None)


def failed(ctx: Context, pool: Pool, problem: str) -> PoolPlan:
    """A pool that cannot be placed: failed, its previous children kept."""
    outcome = PoolOutcome(pool_status(pool, Phase.FAILED, problem), Profiling.NOT_NEEDED)
    return PoolPlan(outcome, keep=keep_previous(ctx, pool))


def waiting(ctx: Context, pool: Pool, wait: Waiting) -> PoolPlan:
    """A pool without a usable table: the previous Deployment, if any, keeps serving."""
    keep = keep_previous(ctx, pool)
    state, message, replicas, ready = wait.state, wait.message, 0, 0
    previous = ctx.observed.child("Deployment", deployment_name(ctx.parent.name, pool.gpu_type))
    if previous is not None and ("Deployment", previous["metadata"]["name"]) in keep:
        rollout = rollout_state(previous)
        replicas, ready = rollout.replicas, rollout.ready
        message += "; the previous table keeps serving meanwhile"
        if state is Phase.FAILED:
            state = Phase.DEGRADED
    status = pool_status(
        pool,
        state,
        message,
        profile=wait.profile_ref,
        profiling_job=wait.job,
        replicas=replicas,
        ready_replicas=ready,
    )
    return PoolPlan(PoolOutcome(status, wait.profiling), keep=keep, shared=wait.shared)


def serving(
    ctx: Context, pool: Pool, served: ServedTable, scale: PoolScale, kids: PoolChildren
) -> PoolPlan:
    """A pool with its children: its state from the Deployment's rollout."""
    verdict, live, profile = served.verdict, served.live, served.profile
    source = None if profile is None else ProfileSource(profile.spec.source.value)
    if live is not None and live.source is LiveSource.LIVE and served.schedule is not None:
        source = ProfileSource.LIVE
    extra: dict[str, Any] = {
        "profile": served.profile_ref,
        "profile_source": source,
        "live": live,
        "schedule": None if served.schedule is None else format_schedule(served.schedule),
        "predicted_gain": None if verdict is None else verdict.gain,
        "speculating": served.schedule is not None,
        "floor": served.floor,
        "autoscaling": scale.status,
    }
    taken = conflict(ctx, kids.owned)
    if taken is not None:
        status = pool_status(pool, Phase.FAILED, taken, **extra)
        return PoolPlan(PoolOutcome(status, served.profiling), shared=served.shared)
    name = kids.deployment["metadata"]["name"]
    state, message, replicas, ready = rollout(ctx, name, kids.deployment)
    message += served.message
    floor = served.floor
    if floor is not None and floor.state is FloorState.PLAIN:
        message += f"; plain decoding (live floor): {floor.reason}"
    elif served.fell_back and verdict is not None:
        message += (
            f"; plain decoding: the profile predicts speculation at {verdict.gain:.2f}x of "
            "it at every batch size served (spec.speculation.fallback: vanilla)"
        )
    status = pool_status(pool, state, message, replicas=replicas, ready_replicas=ready, **extra)
    outcome = PoolOutcome(status, served.profiling, verdict)
    return PoolPlan(outcome, owned=kids.owned, shared=served.shared, scale=scale.state)


def rollout(ctx: Context, name: str, desired: Manifest) -> tuple[Phase, str, int, int]:
    """The pool's state, message and replica counts from its Deployment's rollout."""
    existing = ctx.observed.child("Deployment", name)
    if existing is None:
        return Phase.ROLLING_OUT, f"creating Deployment {name}", 0, 0
    state = rollout_state(existing)
    counts = f"{state.ready}/{state.replicas} replicas ready"
    if needs_apply(desired, existing):
        return Phase.ROLLING_OUT, f"rolling out Deployment {name}", state.replicas, state.ready
    if state.stuck is not None:
        return Phase.DEGRADED, f"{counts}; {state.stuck}", state.replicas, state.ready
    if not state.settled:
        return Phase.ROLLING_OUT, counts, state.replicas, state.ready
    return Phase.READY, counts, state.replicas, state.ready


__all__ = ["PoolPlan", "conflict", "failed", "keep_previous", "pool_status", "rollout", "serving"]
