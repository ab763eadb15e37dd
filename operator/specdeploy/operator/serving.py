"""Serving decisions: a pool with a table in hand gets its ConfigMap and Deployment.

The pool's state follows the Deployment's rollout (creating, rolling out,
degraded, ready); a child whose name is taken by an object that is not ours
fails the pool rather than taking the object over. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specdeploy.operator.api import (
    AutoscalingMode,
    LiveSource,
    Phase,
    Policy,
    PoolLive,
    PoolScaling,
    ProfileSource,
)
from specdeploy.operator.builders.common import Manifest
from specdeploy.operator.builders.configmap import table_configmap
from specdeploy.operator.builders.deployment import ServingPool, serving_deployment
from specdeploy.operator.builders.disruption import pool_disruption_budget
from specdeploy.operator.builders.network import pool_network_policy
from specdeploy.operator.builders.scaler import pool_hpa, pool_scaled_object
from specdeploy.operator.context import Context, PoolPlan, conflict, pool_status
from specdeploy.operator.manifests import needs_apply, with_applied_hash
from specdeploy.operator.naming import deployment_name, label_value, table_configmap_name
from specdeploy.operator.observed import rollout_state
from specdeploy.operator.pools import Pool
from specdeploy.operator.scaling import PoolScale, pool_scale
from specdeploy.operator.status import PoolOutcome, Profiling
from specdeploy.runtime.contract import PoolTable
from specdeploy.runtime.floor import Verdict
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.schedule import Range, format_schedule


@dataclass(frozen=True)
class Table:
    """The K schedule a pool serves with (None: no speculation) and where it came from."""

    schedule: tuple[Range, ...] | None
    profile: SpeculationProfile | None
    profile_ref: str | None
    profiling: Profiling
    shared: tuple[Manifest, ...] = ()
    verdict: Verdict | None = None
    """Against plain decoding; with ``schedule`` None and a losing verdict, the
    pool fell back to plain decoding."""
    live: PoolLive | None = None
    """Telemetry's view of the pool; with ``source: live`` its schedule is ``schedule``."""
    base: tuple[Range, ...] | None = None
    """The schedule the pods start with (the profile's), when ``schedule`` is a live one:
    the pod template keeps it, so a live table restarts nothing."""
    message: str = ""
    """Appended to the pool's message (re-profiling under way)."""

    @property
    def fell_back(self) -> bool:
        return self.schedule is None and self.verdict is not None and self.verdict.loses


def _scale(ctx: Context, pool: Pool, table_in: Table, name: str) -> PoolScale:
    previous = (ctx.previous.get(pool.gpu_type) or {}).get("autoscaling")
    try:
        recorded = PoolScaling.model_validate(previous) if previous else None
    except ValidationError:
        recorded = None  # an older operator's shape: decided afresh
    return pool_scale(
        ctx.spec.autoscaling,
        pool,
        profile=None if table_in.profile is None else table_in.profile.spec,
        schedule=table_in.schedule,
        live=table_in.live,
        window=ctx.windows.get(label_value(pool.gpu_type)),
        deployment=ctx.observed.child("Deployment", name),
        previous=recorded,
        state=ctx.observed.scale.get(pool.gpu_type),
        now=ctx.observed.monotonic,
    )


def _scaler(ctx: Context, pool: Pool, name: str) -> tuple[Manifest, ...]:
    """The pool's HPA or ScaledObject in those modes (none otherwise)."""
    auto, parent = ctx.spec.autoscaling, ctx.parent
    bounds = {"min_replicas": pool.replicas, "max_replicas": pool.max_replicas}
    if auto.mode is AutoscalingMode.HPA:
        hpa = pool_hpa(parent, auto, name=name, gpu_type=pool.gpu_type, **bounds)
        return (with_applied_hash(hpa),)
    url = ctx.spec.telemetry.prometheus_url or ctx.config.prometheus_url
    if auto.mode is AutoscalingMode.KEDA and url:
        scaled = pool_scaled_object(
            parent, auto, name=name, gpu_type=pool.gpu_type, prometheus_url=url, **bounds
        )
        return (with_applied_hash(scaled),)
    return ()


def serve(ctx: Context, pool: Pool, table_in: Table) -> PoolPlan:
    """The pool's ConfigMap and Deployment, and its state from the Deployment's rollout."""
    parent, spec = ctx.parent, ctx.spec
    cm_name = table_configmap_name(parent.name, pool.gpu_type)
    name = deployment_name(parent.name, pool.gpu_type)
    scale = _scale(ctx, pool, table_in, name)
    serving = ServingPool(
        name=name,
        configmap=cm_name,
        gpu_type=pool.gpu_type,
        gpus_per_replica=pool.gpus_per_replica,
        replicas=scale.replicas,
        profile=table_in.profile_ref,
        schedule=table_in.base if table_in.base is not None else table_in.schedule,
    )
    table = PoolTable(
        policy=Policy.OFF if table_in.fell_back else spec.speculation.policy,
        max_k=spec.speculation.max_k,
        fixed_k=spec.speculation.fixed_k,
        schedule=table_in.schedule or (),
        profile=table_in.profile_ref,
    )
    profile = table_in.profile
    profile_spec = None if profile is None else profile.to_document()["spec"]
    configmap = table_configmap(
        parent, name=cm_name, gpu_type=pool.gpu_type, table=table, profile_spec=profile_spec
    )
    deployment = with_applied_hash(serving_deployment(parent, spec, serving))
    budget = pool_disruption_budget(parent, name=serving.name, gpu_type=pool.gpu_type)
    owned: tuple[Manifest, ...] = (
        with_applied_hash(configmap),
        deployment,
        with_applied_hash(budget),
    )
    owned = (*owned, *_scaler(ctx, pool, serving.name))
    if spec.network_policy.enabled:
        fence = pool_network_policy(
            parent, spec.network_policy, name=serving.name, gpu_type=pool.gpu_type
        )
        owned = (*owned, with_applied_hash(fence))
    verdict = table_in.verdict
    live = table_in.live
    source = None if profile is None else ProfileSource(profile.spec.source.value)
    if live is not None and live.source is LiveSource.LIVE and table_in.schedule is not None:
        source = ProfileSource.LIVE
    extra: dict[str, Any] = {
        "profile": table_in.profile_ref,
        "profile_source": source,
        "live": live,
        "schedule": None if table_in.schedule is None else format_schedule(table_in.schedule),
        "predicted_gain": None if verdict is None else verdict.gain,
        "speculating": table_in.schedule is not None,
        "autoscaling": scale.status,
    }
    taken = conflict(ctx, owned)
    if taken is not None:
        status = pool_status(pool, Phase.FAILED, taken, **extra)
        return PoolPlan(PoolOutcome(status, table_in.profiling), shared=table_in.shared)
    state, message, replicas, ready = rollout(ctx, serving.name, deployment)
    message += table_in.message
    if table_in.fell_back and verdict is not None:
        message += (
            f"; plain decoding: the profile predicts speculation at {verdict.gain:.2f}x of "
            "it at every batch size served (spec.speculation.fallback: vanilla)"
        )
    status = pool_status(pool, state, message, replicas=replicas, ready_replicas=ready, **extra)
    outcome = PoolOutcome(status, table_in.profiling, verdict)
    return PoolPlan(outcome, owned=owned, shared=table_in.shared, scale=scale.state)


def rollout(ctx: Context, name: str, desired: Manifest) -> tuple[Phase, str, int, int]:
    existing = ctx.observed.child("Deployment", name)
    if existing is None:
        return Phase.ROLLING_OUT, f"creating Deployment {name}", 0, 0
    rollout = rollout_state(existing)
    counts = f"{rollout.ready}/{rollout.replicas} replicas ready"
    if needs_apply(desired, existing):
        return Phase.ROLLING_OUT, f"rolling out Deployment {name}", rollout.replicas, rollout.ready
    if rollout.stuck is not None:
        return Phase.DEGRADED, f"{counts}; {rollout.stuck}", rollout.replicas, rollout.ready
    if not rollout.settled:
        return Phase.ROLLING_OUT, counts, rollout.replicas, rollout.ready
    return Phase.READY, counts, rollout.replicas, rollout.ready
