"""Profiling decisions: a pool whose policy needs a measured table (adaptive, table).

The pool's fingerprint names its SpeculationProfile. A valid profile of
that name is reused (``profiling.mode: auto``) and handed to serving; else
one profiling Job per fingerprint is wanted, shared by every deployment with
that fingerprint and named after it, so nothing is profiled twice at once.
While the Job runs, fails or is missing its profile, the pool waits and the
previous Deployment, if any, keeps serving untouched. A Job that failed
deterministically (the profiler's exit code says a retry cannot help) is
kept, and so not re-created. One that failed for any other reason (its
deadline passed while its pod waited for a node, exit 1 ``backoffLimit``
times: review M7) is tried again as a new Job, ``TRANSIENT_ATTEMPTS`` times
in all, before the pool is Failed. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.operator.api import Fallback, LiveSource, Phase, PoolLive, ProfilingMode
from specdeploy.operator.builders.common import Manifest
from specdeploy.operator.builders.job import ProfilingJob, profiling_job
from specdeploy.operator.builders.rbac import (
    profiler_role,
    profiler_role_binding,
    profiler_service_account,
)
from specdeploy.operator.context import Context, PoolPlan, keep_previous, pool_status
from specdeploy.operator.fingerprint import pool_fingerprint, profile_name
from specdeploy.operator.naming import deployment_name, job_name, label_value
from specdeploy.operator.observed import (
    JobPhase,
    JobState,
    ProfileView,
    job_state,
    read_profile,
    rollout_state,
)
from specdeploy.operator.pools import Pool
from specdeploy.operator.serving import Table, serve
from specdeploy.operator.status import PoolOutcome, Profiling
from specdeploy.operator.telemetry.assess import PoolInputs, assess_pool, profile_digest, read_live
from specdeploy.runtime.contract import PodEnv
from specdeploy.runtime.floor import Verdict, judge
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.schedule import Range, derive_schedule, schedule_problems


def usable_schedule(
    ctx: Context, name: str, view: ProfileView
) -> tuple[tuple[Range, ...] | None, str]:
    """The profile's schedule if vLLM would accept it for this maxK, else why not."""
    if view.document is None:
        return None, f"SpeculationProfile {name} is invalid: " + "; ".join(view.problems)
    document = view.document
    claimed = document.spec.fingerprint.profile_name()
    if claimed != name:  # review M12: a profile stands only for the fingerprint it names
        return None, (
            f"SpeculationProfile {name} holds the fingerprint of {claimed} (edited by hand, or "
            "written by another tool): not used; delete it to profile again"
        )
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


def _profiling_children(ctx: Context, job: ProfilingJob) -> tuple[Manifest, ...]:
    ns = ctx.parent.namespace
    return (
        profiler_service_account(ns),
        profiler_role(ns),
        profiler_role_binding(ns),
        profiling_job(ctx.spec, job),
    )


@dataclass(frozen=True)
class _Wait:
    """Why a pool has no usable table yet, and what it needs meanwhile."""

    state: Phase
    message: str
    profiling: Profiling
    profile_ref: str
    job: str | None = None
    shared: tuple[Manifest, ...] = ()


def _waiting(ctx: Context, pool: Pool, wait: _Wait) -> PoolPlan:
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


def _job_outcome(
    ctx: Context,
    pool: Pool,
    job: ProfilingJob,
    state: JobState | None,
    failed_before: list[str] | None = None,
) -> PoolPlan:
    """The pool while its profiling Job is wanted: running, failed, or oddly finished
    (``failed_before``: why the earlier attempts failed, for the message)."""
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
    if failed_before:
        attempts = f"attempt {len(failed_before) + 1} of {TRANSIENT_ATTEMPTS}"
        message = f"{message} ({attempts}; before: {'; '.join(failed_before)})"[:1024]
    shared = _profiling_children(ctx, job)
    return _waiting(ctx, pool, _Wait(phase, message, profiling, job.profile_name, name, shared))


TRANSIENT_ATTEMPTS = 3
"""Profiling Jobs tried for one fingerprint when they fail for a reason a retry can cure."""


def _job_for(ctx: Context, pool: Pool, salt: str | None = None, attempt: int = 1) -> ProfilingJob:
    """The profiling Job this pool's fingerprint calls for (``salt``: a re-profiling's;
    ``attempt`` > 1: the retry of a Job that failed transiently)."""
    spec = ctx.spec
    fingerprint = pool_fingerprint(
        spec, gpu_type=pool.gpu_type, gpus_per_replica=pool.gpus_per_replica
    )
    name = profile_name(fingerprint)
    always = spec.profiling.mode is ProfilingMode.ALWAYS
    if salt is None and always:
        salt = f"{ctx.parent.uid}/{ctx.parent.generation}"
    if attempt > 1:
        salt = f"{salt or ''}/attempt-{attempt}"
    return ProfilingJob(
        job_name=job_name(name, salt),
        profile_name=name,
        fingerprint=fingerprint,
        namespace=ctx.parent.namespace,
        image=spec.profiling.image or ctx.config.profiler_image,
    )


def _current_attempt(ctx: Context, pool: Pool) -> tuple[ProfilingJob, JobState | None, list[str]]:
    """The Job of the latest attempt, its state, and why the earlier attempts failed.

    An attempt that failed transiently gives way to the next one, up to
    ``TRANSIENT_ATTEMPTS``; the last one's state is the pool's.
    """
    failed: list[str] = []
    for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
        job = _job_for(ctx, pool, attempt=attempt)
        existing = ctx.observed.child("Job", job.job_name)
        state = (
            None
            if existing is None
            else job_state(existing, ctx.observed.job_pods.get(job.job_name, ()))
        )
        transient = state is not None and state.phase is JobPhase.FAILED and not state.deterministic
        if not transient or attempt == TRANSIENT_ATTEMPTS:
            return job, state, failed
        assert state is not None
        failed.append(f"{job.job_name}: {state.message}")
    raise AssertionError("unreachable")


def profiled_pool(ctx: Context, pool: Pool) -> PoolPlan:
    """A pool whose policy needs a profiled table (adaptive, table)."""
    spec, observed = ctx.spec, ctx.observed
    job, state, failed_before = _current_attempt(ctx, pool)
    name = job.profile_name
    stored = observed.profiles.get(name)
    always = spec.profiling.mode is ProfilingMode.ALWAYS
    # mode always: a profile counts only once this generation's Job has written it.
    done = state is not None and state.phase is JobPhase.SUCCEEDED
    if stored is not None and (done or not always):
        view = read_profile(stored)
        schedule, why = usable_schedule(ctx, name, view)
        marker = (profiling_job(spec, job),) if always else ()
        if schedule is None:
            wait = _Wait(Phase.FAILED, why, Profiling.FAILED, name, shared=marker)
            return _waiting(ctx, pool, wait)
        assert view.document is not None  # usable_schedule returned a schedule
        verdict = judge(view.document.spec, spec.profiling.batch_sizes)
        if verdict.loses and spec.speculation.fallback is Fallback.VANILLA:
            table = Table(None, view.document, name, Profiling.READY, marker, verdict)
            return serve(ctx, pool, table)
        live = _live_table(ctx, pool, (name, view.document), schedule, marker, verdict)
        return serve(ctx, pool, live)
    if spec.profiling.mode is ProfilingMode.NEVER:
        message = f"no SpeculationProfile {name} and spec.profiling.mode is never"
        return _waiting(ctx, pool, _Wait(Phase.PENDING, message, Profiling.MISSING, name))
    return _job_outcome(ctx, pool, job, state, failed_before)


# --- telemetry: the live table and re-profiling on cost drift -------------------


def allowed_k(ctx: Context, pool: Pool, base: tuple[Range, ...]) -> tuple[int, ...]:
    """The K the pool's pods run: their ``SPECDEPLOY_ALLOWED_K``, else the base table's and 0."""
    deployment = ctx.observed.child("Deployment", deployment_name(ctx.parent.name, pool.gpu_type))
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    for container in (template.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == PodEnv.ALLOWED_K.value:
                try:
                    return tuple(sorted({int(k) for k in str(env.get("value")).split(",") if k}))
                except ValueError:
                    break
    return tuple(sorted({0, *(r[2] for r in base)}))


def _assessed(
    ctx: Context, pool: Pool, document: SpeculationProfile, base: tuple[Range, ...]
) -> PoolLive | None:
    inputs = PoolInputs(
        profile=document.spec,
        digest=profile_digest(document),
        base=base,
        allowed_k=allowed_k(ctx, pool, base),
        previous=read_live((ctx.previous.get(pool.gpu_type) or {}).get("live")),
        window=ctx.windows.get(label_value(pool.gpu_type)),
        now=ctx.now,
    )
    return assess_pool(inputs, ctx.config.telemetry)


def _reprofiling(
    ctx: Context, pool: Pool, live: PoolLive
) -> tuple[tuple[Manifest, ...], Profiling, str]:
    """Sustained cost drift: one Job per (fingerprint, profile content), the old table serving."""
    job = _job_for(ctx, pool, salt=f"cost-drift/{live.profile_digest}")
    existing = ctx.observed.child("Job", job.job_name)
    state = (
        None
        if existing is None
        else job_state(existing, ctx.observed.job_pods.get(job.job_name, ()))
    )
    if state is not None and state.phase is JobPhase.FAILED:
        profiling, what = (
            Profiling.FAILED,
            f"re-profiling Job {job.job_name} failed: {state.message}",
        )
    else:
        profiling, what = Profiling.RUNNING, f"re-profiling (cost drift) with Job {job.job_name}"
    return _profiling_children(ctx, job), profiling, f"; {what}; the old table serves meanwhile"


def _live_table(
    ctx: Context,
    pool: Pool,
    profile: tuple[str, SpeculationProfile],
    base: tuple[Range, ...],
    marker: tuple[Manifest, ...],
    verdict: Verdict,
) -> Table:
    """The pool's table: the live schedule when telemetry put one in force, else the profile's."""
    name, document = profile
    live = _assessed(ctx, pool, document, base)
    schedule = base
    if live is not None and live.source is LiveSource.LIVE and live.schedule_ranges:
        schedule = tuple((int(a), int(b), int(c)) for a, b, c in live.schedule_ranges)
    shared, profiling, message = marker, Profiling.READY, ""
    if live is not None and live.cost_drift:
        children, profiling, message = _reprofiling(ctx, pool, live)
        shared = marker + children
    return Table(
        schedule,
        document,
        name,
        profiling,
        shared,
        verdict,
        live=live,
        base=base,
        message=message,
    )
