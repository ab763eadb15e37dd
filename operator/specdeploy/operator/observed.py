"""The state of the world one reconcile decides from, gathered in one value.

``k8s.gather`` fills an ``Observed`` (I/O); everything here reads it without
I/O: what a Job, its pods, a Deployment or a SpeculationProfile say, reduced
to the few facts the decisions need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specdeploy.runtime.contract import PodEnv
from specdeploy.runtime.profile import ProfileError, SpeculationProfile, parse_profile
from specdeploy.runtime.profiler.job_contract import DETERMINISTIC_EXIT_CODES, PROFILER_CONTAINER

Obj = Mapping[str, Any]


class Watch(StrEnum):
    """How the operator learns that a child kind changed."""

    EVENTS = "events"
    """Watched: an edit or deletion reconciles the child's owners."""
    READS = "reads"
    """Watched into the cache for reads only (an HPA's status changes at every sync of the
    HPA controller: only a deletion or a spec edit reconciles its owner)."""
    LISTED = "listed"
    """Not watched, listed per reconcile: its API may come and go (KEDA's)."""


@dataclass(frozen=True)
class ChildKind:
    """A kind the operator creates, and what it means to the operator."""

    kind: str
    shared: bool
    """Needed by every deployment of a fingerprint (a profiling Job and its RBAC): joined
    and left, never owned by one deployment alone."""
    watch: Watch


CHILDREN = (
    ChildKind("ConfigMap", shared=False, watch=Watch.EVENTS),
    ChildKind("Deployment", shared=False, watch=Watch.EVENTS),
    ChildKind("Service", shared=False, watch=Watch.EVENTS),
    ChildKind("Job", shared=True, watch=Watch.EVENTS),
    ChildKind("ServiceAccount", shared=True, watch=Watch.EVENTS),
    ChildKind("Role", shared=True, watch=Watch.EVENTS),
    ChildKind("RoleBinding", shared=True, watch=Watch.EVENTS),
    ChildKind("PodDisruptionBudget", shared=False, watch=Watch.EVENTS),
    ChildKind("NetworkPolicy", shared=False, watch=Watch.EVENTS),
    ChildKind("HorizontalPodAutoscaler", shared=False, watch=Watch.READS),
    ChildKind("ScaledObject", shared=False, watch=Watch.LISTED),
)
"""Every kind the operator creates: the one table the reads, the plan and the watches use."""
CHILD_KINDS = tuple(c.kind for c in CHILDREN)
OWNED_KINDS = tuple(c.kind for c in CHILDREN if not c.shared)
"""Kinds one deployment alone owns: applied while wanted, deleted once not (a pool gone, or
its autoscaling mode changed, so an old scaler never fights the new one)."""
SHARED_KINDS = tuple(c.kind for c in CHILDREN if c.shared)
WATCHED_KINDS = tuple(c.kind for c in CHILDREN if c.watch is Watch.EVENTS)
READ_ONLY_WATCHED_KINDS = tuple(c.kind for c in CHILDREN if c.watch is Watch.READS)
OPTIONAL_KINDS = frozenset(c.kind for c in CHILDREN if c.watch is Watch.LISTED)
"""Kinds of APIs a cluster may not serve (KEDA's): listed as none when absent."""


@dataclass(frozen=True)
class Observed:
    """Every input of a decision besides the deployment itself.

    ``children`` holds the operator-managed objects of the namespace by kind
    and name (all of them: shared ones may belong to other deployments);
    ``job_pods`` the pods of each profiling Job; ``profiles`` the
    SpeculationProfiles of the namespace by name.
    """

    nodes: Sequence[Obj] = ()
    profiles: Mapping[str, Obj] = field(default_factory=dict)
    children: Mapping[str, Mapping[str, Obj]] = field(default_factory=dict)
    job_pods: Mapping[str, Sequence[Obj]] = field(default_factory=dict)

    def child(self, kind: str, name: str) -> Obj | None:
        return self.children.get(kind, {}).get(name)


def owner_uids(obj: Obj) -> list[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [str(r.get("uid")) for r in refs]


# --- pool Deployments ----------------------------------------------------


def current_replicas(deployment: Obj | None) -> int | None:
    """The pool Deployment's ``spec.replicas`` now (None: no Deployment yet)."""
    if deployment is None:
        return None
    value = (deployment.get("spec") or {}).get("replicas")
    return int(value) if isinstance(value, int) else 1  # the API server's default


def pods_allowed_k(deployment: Obj | None) -> tuple[int, ...] | None:
    """The K the Deployment's pods run (their ``SPECDEPLOY_ALLOWED_K``); None: not set."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    for container in (template.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == PodEnv.ALLOWED_K.value:
                try:
                    return tuple(sorted({int(k) for k in str(env.get("value")).split(",") if k}))
                except ValueError:
                    return None
    return None


# --- profiling Jobs ------------------------------------------------------


class JobPhase(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class JobState:
    phase: JobPhase
    message: str
    deterministic: bool = False


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _terminations(pods: Sequence[Obj]) -> list[tuple[int, str]]:
    """(exit code, message) of every terminated profiler container, oldest pod first."""
    found = []
    ordered = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))
    for pod in ordered:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            done = (status.get("state") or {}).get("terminated")
            if status.get("name") == PROFILER_CONTAINER and done:
                found.append((int(done.get("exitCode", 0)), str(done.get("message") or "").strip()))
    return found


def _failure(job: Obj, pods: Sequence[Obj]) -> JobState:
    failed = [t for t in _terminations(pods) if t[0] != 0]
    cond = _condition(job, "Failed") or _condition(job, "FailureTarget") or {}
    reason = str(cond.get("reason") or "Failed")
    if failed:
        code, text = failed[-1]
        deterministic = code in DETERMINISTIC_EXIT_CODES
        kind = "deterministic, not retried" if deterministic else "after retries"
        detail = text or f"exit code {code}"
        return JobState(JobPhase.FAILED, f"{reason} ({kind}): exit {code}: {detail}", deterministic)
    return JobState(JobPhase.FAILED, f"{reason}: {cond.get('message') or 'no pod finished'}")


def job_state(job: Obj, pods: Sequence[Obj] = ()) -> JobState:
    """What a profiling Job is doing, with the profiler's own reason when it failed."""
    if _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet"):
        return JobState(JobPhase.SUCCEEDED, "profile written")
    if _condition(job, "Failed") or _condition(job, "FailureTarget"):
        return _failure(job, pods)
    status = job.get("status") or {}
    active, failed = int(status.get("active") or 0), int(status.get("failed") or 0)
    retries = f", {failed} failed attempt(s)" if failed else ""
    stuck = _why_not_running(pods)
    if stuck:
        return JobState(JobPhase.RUNNING, f"profiler pod {stuck}{retries}")
    if active:
        return JobState(JobPhase.RUNNING, f"{active} profiler pod(s) running{retries}")
    return JobState(JobPhase.RUNNING, f"waiting for a profiler pod{retries}")


def _why_not_running(pods: Sequence[Obj]) -> str | None:
    """What keeps the newest live pod from running: unscheduled, or a container waiting.

    A Job counts such a pod as active, and "running" hid a pod that could not be
    scheduled or pulled for the two hours of the deadline (review M7).
    """
    live = [p for p in pods if (p.get("status") or {}).get("phase") in ("Pending", None)]
    if not live:
        return None
    pod = max(live, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            why = cond.get("reason") or "Unschedulable"
            return f"not scheduled ({why}): {str(cond.get('message') or '').strip()[:300]}"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] != "ContainerCreating":
            detail = str(waiting.get("message") or "").strip()[:300]
            return f"waiting ({waiting['reason']})" + (f": {detail}" if detail else "")
    return "pending"


# --- Deployments ---------------------------------------------------------


@dataclass(frozen=True)
class RolloutState:
    replicas: int
    ready: int
    settled: bool
    """The controller saw the latest spec and every replica runs it."""
    stuck: str | None = None
    """Why the rollout stopped progressing (progress deadline exceeded)."""


def rollout_state(deployment: Obj) -> RolloutState:
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    total = int(status.get("replicas") or 0)
    seen = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    settled = seen and updated == wanted and ready == wanted and total == wanted
    stuck = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            stuck = str(cond.get("message") or "progress deadline exceeded")
    return RolloutState(replicas=wanted, ready=ready, settled=settled, stuck=stuck)


# --- SpeculationProfiles -------------------------------------------------


@dataclass(frozen=True)
class ProfileView:
    """A stored profile, parsed; ``problems`` when it cannot be used."""

    document: SpeculationProfile | None
    problems: tuple[str, ...] = ()


def read_profile(obj: Obj) -> ProfileView:
    data = {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "spec")}
    try:
        return ProfileView(parse_profile(data, source=f"SpeculationProfile {_name(obj)}"))
    except ProfileError as err:
        return ProfileView(None, tuple(err.problems))


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name"))
