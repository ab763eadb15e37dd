"""The children stage: a pool's ConfigMap, Deployment, disruption budget, scaler and fence.

Built from the served table and the replica count alone; whether they can be
written (a name taken) and what the rollout says is the outcome stage's.
While the live floor holds a pool at plain decoding, the pool also owns its
canary: a one-replica Deployment beside the plain one (surged: the pool's
replica count is the plain Deployment's), speculating with the add-on and
the table in the ConfigMap, so its telemetry can bring the pool back. While
it holds a speculating pool whose R is undecided, the pool owns a plain
reference instead: one surged replica without speculation, whose latency the
operator compares with the speculating pods' (``pool.plain_reference``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.operator.api import AutoscalingMode, Policy
from specdeploy.operator.builders.common import Manifest
from specdeploy.operator.builders.configmap import table_configmap
from specdeploy.operator.builders.deployment import ServingPool, serving_deployment
from specdeploy.operator.builders.disruption import pool_disruption_budget
from specdeploy.operator.builders.network import pool_network_policy
from specdeploy.operator.builders.scaler import pool_hpa, pool_scaled_object
from specdeploy.operator.manifests import with_applied_hash
from specdeploy.operator.naming import (
    canary_deployment_name,
    deployment_name,
    reference_deployment_name,
    table_configmap_name,
)
from specdeploy.operator.pool.context import Context
from specdeploy.operator.pool.pools import Pool
from specdeploy.operator.pool.scaling import PoolScale
from specdeploy.operator.pool.table import ServedTable
from specdeploy.runtime.contract import PoolTable
from specdeploy.runtime.ranges import Range


@dataclass(frozen=True)
class PoolChildren:
    """What one serving pool owns, in the form to apply."""

    owned: tuple[Manifest, ...]
    deployment: Manifest
    """The pool's Deployment as applied (also in ``owned``): its rollout is the pool's state."""


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


def _companion(
    ctx: Context,
    pool: Pool,
    served: ServedTable,
    configmap: str,
    schedule: tuple[Range, ...] | None,
    *,
    canary: bool = False,
    reference: bool = False,
) -> Manifest:
    """The live floor's one-replica Deployment beside the pool's own: the canary (speculating
    with ``schedule`` while the pool is plain) or the plain reference (no schedule)."""
    name = canary_deployment_name if canary else reference_deployment_name
    companion = ServingPool(
        name=name(ctx.parent.name, pool.gpu_type),
        configmap=configmap,
        gpu_type=pool.gpu_type,
        gpus_per_replica=pool.gpus_per_replica,
        replicas=1,
        profile=served.profile_ref,
        schedule=schedule,
        canary=canary,
        reference=reference,
    )
    return with_applied_hash(serving_deployment(ctx.parent, ctx.spec, companion))


def pool_children(ctx: Context, pool: Pool, served: ServedTable, scale: PoolScale) -> PoolChildren:
    """The pool's ConfigMap (the table in force) and Deployment (the base table), and the rest."""
    parent, spec = ctx.parent, ctx.spec
    cm_name = table_configmap_name(parent.name, pool.gpu_type)
    serving = ServingPool(
        name=deployment_name(parent.name, pool.gpu_type),
        configmap=cm_name,
        gpu_type=pool.gpu_type,
        gpus_per_replica=pool.gpus_per_replica,
        replicas=scale.replicas,
        profile=served.profile_ref,
        schedule=served.base if served.base is not None else served.schedule,
    )
    canary = served.canary
    table = PoolTable(
        policy=Policy.OFF if served.fell_back and canary is None else spec.speculation.policy,
        max_k=spec.speculation.max_k,
        fixed_k=spec.speculation.fixed_k,
        schedule=served.schedule or canary or (),
        profile=served.profile_ref,
    )
    profile = served.profile
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
    if canary is not None:
        canary_table = served.canary_base if served.canary_base is not None else canary
        owned = (*owned, _companion(ctx, pool, served, cm_name, canary_table, canary=True))
    floor = served.floor
    if served.schedule is not None and floor is not None and floor.reference_since is not None:
        owned = (*owned, _companion(ctx, pool, served, cm_name, None, reference=True))
    owned = (*owned, *_scaler(ctx, pool, serving.name))
    if spec.network_policy.enabled:
        fence = pool_network_policy(
            parent, spec.network_policy, name=serving.name, gpu_type=pool.gpu_type
        )
        owned = (*owned, with_applied_hash(fence))
    return PoolChildren(owned, deployment)


__all__ = ["PoolChildren", "pool_children"]
