"""Profiling Jobs: which one a pool's fingerprint calls for, and where the pool stands with it.

One profiling Job per fingerprint is wanted, shared by every deployment
with that fingerprint and named after it, so nothing is profiled twice at
once. While the Job runs, fails or is missing its profile, the pool waits
(``Waiting``) and the previous Deployment, if any, keeps serving untouched.
A Job that failed deterministically (the profiler's exit code says a retry
cannot help) is kept, and so not re-created. One that failed for any other
reason (its deadline passed while its pod waited for a node, exit 1
``backoffLimit`` times: review M7) is tried again as a new Job,
``TRANSIENT_ATTEMPTS`` times in all, before the pool is Failed. Sustained
cost drift asks for one more Job per profile content (``reprofiling``). Pure.
"""

from __future__ import annotations

from specdeploy.operator.api import Phase, PoolLive, ProfilingMode
from specdeploy.operator.builders.common import Manifest
from specdeploy.operator.builders.job import ProfilingJob, profiling_job
from specdeploy.operator.builders.rbac import (
    profiler_role,
    profiler_role_binding,
    profiler_service_account,
)
from specdeploy.operator.naming import job_name
from specdeploy.operator.observed import JobPhase, JobState, job_state
from specdeploy.operator.pool.context import Context, Profiling, Waiting
from specdeploy.operator.pool.fingerprint import pool_fingerprint, profile_name
from specdeploy.operator.pool.pools import Pool

TRANSIENT_ATTEMPTS = 3
"""Profiling Jobs tried for one fingerprint when they fail for a reason a retry can cure."""


def profiling_children(ctx: Context, job: ProfilingJob) -> tuple[Manifest, ...]:
    """The Job and the RBAC its pod writes the profile with."""
    ns = ctx.parent.namespace
    return (
        profiler_service_account(ns),
        profiler_role(ns),
        profiler_role_binding(ns),
        profiling_job(ctx.spec, job),
    )


def job_for(ctx: Context, pool: Pool, salt: str | None = None, attempt: int = 1) -> ProfilingJob:
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


def observed_state(ctx: Context, job: ProfilingJob) -> JobState | None:
    """The Job's state from it and its pods (None: no such Job)."""
    existing = ctx.observed.child("Job", job.job_name)
    if existing is None:
        return None
    return job_state(existing, ctx.observed.job_pods.get(job.job_name, ()))


def current_attempt(ctx: Context, pool: Pool) -> tuple[ProfilingJob, JobState | None, list[str]]:
    """The Job of the latest attempt, its state, and why the earlier attempts failed.

    An attempt that failed transiently gives way to the next one, up to
    ``TRANSIENT_ATTEMPTS``; the last one's state is the pool's.
    """
    failed: list[str] = []
    for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
        job = job_for(ctx, pool, attempt=attempt)
        state = observed_state(ctx, job)
        transient = state is not None and state.phase is JobPhase.FAILED and not state.deterministic
        if not transient or attempt == TRANSIENT_ATTEMPTS:
            return job, state, failed
        assert state is not None
        failed.append(f"{job.job_name}: {state.message}")
    raise AssertionError("unreachable")


def job_waiting(
    ctx: Context,
    job: ProfilingJob,
    state: JobState | None,
    failed_before: list[str] | None = None,
) -> Waiting:
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
    shared = profiling_children(ctx, job)
    return Waiting(phase, message, profiling, job.profile_name, name, shared)


def reprofiling(
    ctx: Context, pool: Pool, live: PoolLive
) -> tuple[tuple[Manifest, ...], Profiling, str]:
    """Sustained cost drift: one Job per (fingerprint, profile content), the old table serving."""
    job = job_for(ctx, pool, salt=f"cost-drift/{live.profile_digest}")
    state = observed_state(ctx, job)
    if state is not None and state.phase is JobPhase.FAILED:
        profiling, what = (
            Profiling.FAILED,
            f"re-profiling Job {job.job_name} failed: {state.message}",
        )
    else:
        profiling, what = Profiling.RUNNING, f"re-profiling (cost drift) with Job {job.job_name}"
    return profiling_children(ctx, job), profiling, f"; {what}; the old table serves meanwhile"


__all__ = [
    "TRANSIENT_ATTEMPTS",
    "current_attempt",
    "job_for",
    "job_waiting",
    "observed_state",
    "profiling_children",
    "reprofiling",
]
