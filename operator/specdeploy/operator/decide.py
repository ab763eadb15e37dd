"""The decision: (SpeculativeDeployment, observed state) -> desired children and status.

Pure and level-triggered: it looks only at what exists now, never at what
happened, so running it twice, after a watch restart or after the
operator's own restart, decides the same thing. Per pool:

1. the pool's fingerprint names its SpeculationProfile (``p-<digest>``);
2. policies ``off`` and ``fixed`` need no profile; otherwise a valid profile
   with that name is reused (``profiling.mode: auto``), or one profiling Job
   per fingerprint is wanted (shared by every deployment with that
   fingerprint, named after it, so nothing is ever profiled twice at once);
3. with a table in hand, the pool's ConfigMap and Deployment are wanted.
   While a new fingerprint is being profiled the previous Deployment keeps
   serving, untouched.

A failed profiling Job is kept (and so not re-created) until the fingerprint
changes or someone deletes it: a deterministic failure would fail again.
An invalid spec gets no new children, and keeps whatever it already has:
an invalid update never takes down what serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specdeploy.operator.api import (
    Phase,
    Policy,
    PoolStatus,
    ProfileSource,
    ProfilingMode,
    SpeculativeDeploymentSpec,
)
from specdeploy.operator.builders.common import APPLIED_HASH, Manifest, Parent
from specdeploy.operator.builders.configmap import table_configmap
from specdeploy.operator.builders.deployment import ServingPool, serving_deployment
from specdeploy.operator.builders.job import DEFAULT_IMAGE, ProfilingJob, profiling_job
from specdeploy.operator.builders.rbac import (
    profiler_role,
    profiler_role_binding,
    profiler_service_account,
)
from specdeploy.operator.builders.service import model_service
from specdeploy.operator.discovery import gpu_inventory
from specdeploy.operator.fingerprint import pool_fingerprint, profile_name
from specdeploy.operator.manifests import content_hash, is_subset
from specdeploy.operator.naming import (
    deployment_name,
    job_name,
    service_name,
    table_configmap_name,
)
from specdeploy.operator.observed import (
    JobPhase,
    JobState,
    Observed,
    ProfileView,
    job_state,
    owner_uids,
    read_profile,
    rollout_state,
)
from specdeploy.operator.pools import Pool, plan_pools
from specdeploy.operator.status import (
    EventSpec,
    PoolOutcome,
    Profiling,
    compose,
    invalid,
    to_wire,
    transition_events,
)
from specdeploy.operator.validation import validate
from specdeploy.runtime.contract import PoolTable
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.schedule import Range, derive_schedule, format_schedule, schedule_problems

Ref = tuple[str, str]
"""(kind, name) of a child."""


@dataclass(frozen=True)
class Config:
    """Operator-wide settings that are not part of any spec."""

    profiler_image: str = DEFAULT_IMAGE


DEFAULT_CONFIG = Config()


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


@dataclass(frozen=True)
class _PoolPlan:
    outcome: PoolOutcome
    owned: tuple[Manifest, ...] = ()
    keep: frozenset[Ref] = frozenset()
    shared: tuple[Manifest, ...] = ()


@dataclass(frozen=True)
class _Context:
    parent: Parent
    spec: SpeculativeDeploymentSpec
    observed: Observed
    config: Config


def ref_of(manifest: Mapping[str, Any]) -> Ref:
    return str(manifest["kind"]), str(manifest["metadata"]["name"])


_IDENTITY = frozenset({"apiVersion", "kind", "metadata", "status"})


def applied_hash(manifest: Mapping[str, Any]) -> str:
    """The hash of a manifest's content, its own hash annotation left out."""
    meta = dict(manifest["metadata"])
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if k != APPLIED_HASH}
    meta["annotations"] = annotations
    return content_hash({**manifest, "metadata": meta})


def with_applied_hash(manifest: Manifest) -> Manifest:
    """The manifest carrying the hash of its own content, to recognise it later."""
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), APPLIED_HASH: applied_hash(manifest)}
    return {**manifest, "metadata": meta}


def needs_apply(manifest: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    """Whether an owned child must be (re)applied: absent, changed, or edited by hand."""
    if existing is None:
        return True
    annotations = (existing.get("metadata") or {}).get("annotations") or {}
    if annotations.get(APPLIED_HASH) != applied_hash(manifest):
        return True
    # Items of a List carry no apiVersion/kind: compare the content only.
    content = {k: v for k, v in manifest.items() if k not in _IDENTITY}
    return not is_subset(content, existing)


# --- one pool ------------------------------------------------------------


def _status(pool: Pool, state: Phase, message: str, **extra: Any) -> PoolStatus:
    return PoolStatus(gpu_type=pool.gpu_type, state=state, message=message, **extra)


def _conflict(ctx: _Context, manifests: tuple[Manifest, ...]) -> str | None:
    """Why a wanted child cannot be written: its name is taken by an object not ours."""
    for manifest in manifests:
        kind, name = ref_of(manifest)
        existing = ctx.observed.child(kind, name)
        if existing is not None and ctx.parent.uid not in owner_uids(existing):
            return f"{kind} {name} exists and does not belong to this SpeculativeDeployment"
    return None


@dataclass(frozen=True)
class _Table:
    """The K schedule a pool serves with (None: no speculation) and where it came from."""

    schedule: tuple[Range, ...] | None
    profile: SpeculationProfile | None
    profile_ref: str | None
    profiling: Profiling
    shared: tuple[Manifest, ...] = ()


def _serve(ctx: _Context, pool: Pool, table_in: _Table) -> _PoolPlan:
    """The pool's ConfigMap and Deployment, and its state from the Deployment's rollout."""
    parent, spec = ctx.parent, ctx.spec
    cm_name = table_configmap_name(parent.name, pool.gpu_type)
    serving = ServingPool(
        name=deployment_name(parent.name, pool.gpu_type),
        configmap=cm_name,
        gpu_type=pool.gpu_type,
        gpus_per_replica=pool.gpus_per_replica,
        replicas=pool.replicas,
        profile=table_in.profile_ref,
        schedule=table_in.schedule,
    )
    table = PoolTable(
        policy=spec.speculation.policy,
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
    owned = (with_applied_hash(configmap), deployment)
    extra: dict[str, Any] = {
        "profile": table_in.profile_ref,
        "profile_source": None if profile is None else ProfileSource(profile.spec.source.value),
        "schedule": None if table_in.schedule is None else format_schedule(table_in.schedule),
    }
    conflict = _conflict(ctx, owned)
    if conflict is not None:
        status = _status(pool, Phase.FAILED, conflict, **extra)
        return _PoolPlan(PoolOutcome(status, table_in.profiling), shared=table_in.shared)
    state, message, replicas, ready = _rollout(ctx, serving.name, deployment)
    status = _status(pool, state, message, replicas=replicas, ready_replicas=ready, **extra)
    outcome = PoolOutcome(status, table_in.profiling)
    return _PoolPlan(outcome, owned=owned, shared=table_in.shared)


def _rollout(ctx: _Context, name: str, desired: Manifest) -> tuple[Phase, str, int, int]:
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


def _usable_schedule(
    ctx: _Context, name: str, view: ProfileView
) -> tuple[tuple[Range, ...] | None, str]:
    """The profile's schedule if vLLM would accept it for this maxK, else why not."""
    if view.document is None:
        return None, f"SpeculationProfile {name} is invalid: " + "; ".join(view.problems)
    document = view.document
    schedule = document.spec.schedule
    ranges = tuple(schedule) if schedule is not None else tuple(derive_schedule(document.spec))
    max_k = ctx.spec.speculation.max_k
    problems = list(schedule_problems(ranges, max_k=max_k))
    if problems:
        return (
            None,
            f"SpeculationProfile {name}: schedule unusable with maxK={max_k}: "
            + "; ".join(problems),
        )
    return ranges, ""


def _profiling_children(ctx: _Context, job: ProfilingJob) -> tuple[Manifest, ...]:
    ns = ctx.parent.namespace
    return (
        profiler_service_account(ns),
        profiler_role(ns),
        profiler_role_binding(ns),
        profiling_job(ctx.spec, job),
    )


def _keep_previous(ctx: _Context, pool: Pool) -> frozenset[Ref]:
    """The pool's current ConfigMap and Deployment, if any: they serve while we profile."""
    parent = ctx.parent
    refs = {
        ("Deployment", deployment_name(parent.name, pool.gpu_type)),
        ("ConfigMap", table_configmap_name(parent.name, pool.gpu_type)),
    }
    return frozenset(r for r in refs if ctx.observed.child(*r) is not None)


@dataclass(frozen=True)
class _Wait:
    """Why a pool has no usable table yet, and what it needs meanwhile."""

    state: Phase
    message: str
    profiling: Profiling
    profile_ref: str
    job: str | None = None
    shared: tuple[Manifest, ...] = ()


def _waiting(ctx: _Context, pool: Pool, wait: _Wait) -> _PoolPlan:
    """A pool without a usable table: the previous Deployment, if any, keeps serving."""
    keep = _keep_previous(ctx, pool)
    state, message, replicas, ready = wait.state, wait.message, 0, 0
    previous = ctx.observed.child("Deployment", deployment_name(ctx.parent.name, pool.gpu_type))
    if previous is not None and ("Deployment", previous["metadata"]["name"]) in keep:
        rollout = rollout_state(previous)
        replicas, ready = rollout.replicas, rollout.ready
        message += "; the previous table keeps serving meanwhile"
        if state is Phase.FAILED:
            state = Phase.DEGRADED
    status = _status(
        pool,
        state,
        message,
        profile=wait.profile_ref,
        profiling_job=wait.job,
        replicas=replicas,
        ready_replicas=ready,
    )
    return _PoolPlan(PoolOutcome(status, wait.profiling), keep=keep, shared=wait.shared)


def _job_outcome(ctx: _Context, pool: Pool, job: ProfilingJob, state: JobState | None) -> _PoolPlan:
    """The pool while its profiling Job is wanted: running, failed, or oddly finished."""
    name = job.job_name
    if state is None or state.phase is JobPhase.RUNNING:
        message = (
            f"starting profiling Job {name}"
            if state is None
            else f"profiling Job {name}: {state.message}"
        )
        phase, profiling = Phase.PROFILING, Profiling.RUNNING
    elif state.phase is JobPhase.FAILED:
        message = f"profiling Job {name} failed: {state.message}"
        phase, profiling = Phase.FAILED, Profiling.FAILED
    else:
        message = (
            f"profiling Job {name} succeeded but SpeculationProfile "
            f"{job.profile_name} is missing (delete the Job to profile again)"
        )
        phase, profiling = Phase.FAILED, Profiling.FAILED
    shared = _profiling_children(ctx, job)
    return _waiting(ctx, pool, _Wait(phase, message, profiling, job.profile_name, name, shared))


def _job_for(ctx: _Context, pool: Pool) -> ProfilingJob:
    """The profiling Job this pool's fingerprint calls for."""
    spec = ctx.spec
    fingerprint = pool_fingerprint(
        spec, gpu_type=pool.gpu_type, gpus_per_replica=pool.gpus_per_replica
    )
    name = profile_name(fingerprint)
    always = spec.profiling.mode is ProfilingMode.ALWAYS
    salt = f"{ctx.parent.uid}/{ctx.parent.generation}" if always else None
    return ProfilingJob(
        job_name=job_name(name, salt),
        profile_name=name,
        fingerprint=fingerprint,
        namespace=ctx.parent.namespace,
        image=spec.profiling.image or ctx.config.profiler_image,
    )


def _profiled_pool(ctx: _Context, pool: Pool) -> _PoolPlan:
    """A pool whose policy needs a profiled table (adaptive, table)."""
    spec, observed = ctx.spec, ctx.observed
    job = _job_for(ctx, pool)
    name = job.profile_name
    existing_job = observed.child("Job", job.job_name)
    state = None
    if existing_job is not None:
        state = job_state(existing_job, observed.job_pods.get(job.job_name, ()))
    stored = observed.profiles.get(name)
    always = spec.profiling.mode is ProfilingMode.ALWAYS
    # mode always: a profile counts only once this generation's Job has written it.
    done = state is not None and state.phase is JobPhase.SUCCEEDED
    if stored is not None and (done or not always):
        view = read_profile(stored)
        schedule, why = _usable_schedule(ctx, name, view)
        marker = (profiling_job(spec, job),) if always else ()
        if schedule is None:
            wait = _Wait(Phase.FAILED, why, Profiling.FAILED, name, shared=marker)
            return _waiting(ctx, pool, wait)
        served = _Table(schedule, view.document, name, Profiling.READY, marker)
        return _serve(ctx, pool, served)
    if spec.profiling.mode is ProfilingMode.NEVER:
        message = f"no SpeculationProfile {name} and spec.profiling.mode is never"
        return _waiting(ctx, pool, _Wait(Phase.PENDING, message, Profiling.MISSING, name))
    return _job_outcome(ctx, pool, job, state)


def decide_pool(ctx: _Context, pool: Pool) -> _PoolPlan:
    problem = pool.placement_problem()
    if problem is not None:
        outcome = PoolOutcome(_status(pool, Phase.FAILED, problem), Profiling.NOT_NEEDED)
        return _PoolPlan(outcome, keep=_keep_previous(ctx, pool))
    policy = ctx.spec.speculation.policy
    if policy is Policy.OFF:
        return _serve(ctx, pool, _Table(None, None, None, Profiling.NOT_NEEDED))
    if policy is Policy.FIXED:
        # One range from batch size 1: vLLM gives every larger batch the last K.
        fixed = ((1, 1, ctx.spec.speculation.fixed_k or 0),)
        return _serve(ctx, pool, _Table(fixed, None, None, Profiling.NOT_NEEDED))
    return _profiled_pool(ctx, pool)


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
    body: Mapping[str, Any], observed: Observed, *, now: str, config: Config = DEFAULT_CONFIG
) -> Decision:
    """Everything one reconcile should make true, from the object and the observed state."""
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
    ctx = _Context(parent, spec, observed, config)
    pools = plan_pools(spec, gpu_inventory(observed.nodes, spec.node_selector))
    plans = [decide_pool(ctx, pool) for pool in pools]
    service = with_applied_hash(model_service(parent, name=service_name(parent.name)))
    owned = [service] if _conflict(ctx, (service,)) is None else []
    status = to_wire(
        compose(
            old=old_status,
            outcomes=[p.outcome for p in plans],
            generation=parent.generation,
            now=now,
        )
    )
    return Decision(
        owned=_unique(owned + [m for p in plans for m in p.owned]),
        keep=frozenset(r for p in plans for r in p.keep),
        shared=_unique([m for p in plans for m in p.shared]),
        status=status,
        events=tuple(transition_events(old_status, status)),
    )
