"""The invariants I1-I7 of review §5.2, as pure functions of what was read.

Each takes plain data (objects as the API server returned them, audit
writes, log text) and answers a ``Check``: so each can be tested with
literal inputs, and the oracle (``oracle``) does all the reading.

- I1 lost: wanted children (the operator's own ``decide`` on a fresh read,
  plus the kinds the scenario expects) that do not exist;
- I2 duplicates: more than one Job per profile label, more than one
  serving Deployment or table ConfigMap per deployment and pool, more than
  one Service per deployment;
- I3 orphans: managed objects whose every SpeculativeDeployment owner is gone;
- I4 convergence: the wanted state reached (phase, observedGeneration, no
  child write left to do) within the bound after the fault cleared;
- I5 steady state: no operator write in the window after convergence;
- I6 collateral: serving Deployments' uid and generation, and Jobs' uid,
  changed only as the scenario intends;
- I7 nothing swallowed: no traceback, "reconcile raised", "will ignore it"
  or "Task exception was never retrieved" in the operator's log.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from e2e.time_scale import scaled
from specdeploy.operator.api import DEPLOYMENT_KIND
from specdeploy.operator.builders.common import (
    COMPONENT_LABEL,
    DEPLOYMENT_LABEL,
    POOL_LABEL,
    PROFILE_LABEL,
    SERVING,
    TABLE,
)

Obj = dict[str, Any]
Ref = tuple[str, str]
CONVERGENCE_BOUND_S = 60.0
SWALLOWED = (
    "Traceback (most recent call last)",
    "reconcile raised",
    "will ignore it",
    "Task exception was never retrieved",
)


@dataclass(frozen=True)
class Check:
    id: str
    ok: bool
    detail: str = ""
    value: float | int | None = None


@dataclass(frozen=True)
class Intent:
    """What a scenario means to change in the objects it watches (I6).

    ``deployment_generation``: the allowed (min, max) generation delta of each
    serving Deployment that existed before the fault; ``deployment_uid_kept``:
    whether those Deployments must be the same objects afterwards;
    ``job_uid_kept``: whether the Jobs that existed before must survive as the
    same objects (False: the scenario lets them finish or be replaced).
    """

    deployment_generation: tuple[int, int] = (0, 0)
    deployment_uid_kept: bool = True
    job_uid_kept: bool = False


@dataclass(frozen=True)
class Snapshot:
    """uid and generation of the serving Deployments and Jobs of a namespace."""

    deployments: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    jobs: Mapping[str, str] = field(default_factory=dict)


def snapshot(deployments: Iterable[Obj], jobs: Iterable[Obj]) -> Snapshot:
    serving = {
        d["metadata"]["name"]: (d["metadata"]["uid"], int(d["metadata"].get("generation") or 0))
        for d in deployments
        if (d["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == SERVING
    }
    return Snapshot(serving, {j["metadata"]["name"]: j["metadata"]["uid"] for j in jobs})


def lost(wanted: Iterable[Ref], existing: Iterable[Ref]) -> Check:
    missing = sorted(set(wanted) - set(existing))
    detail = ", ".join(f"{k}/{n}" for k, n in missing)
    return Check("I1", not missing, detail or "every wanted child exists", len(missing))


def _labels(obj: Obj) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def duplicates(children: Mapping[str, Sequence[Obj]]) -> Check:
    """More than one object where the design allows one (per label key)."""
    groups: Counter[str] = Counter()
    for job in children.get("Job", ()):
        profile = _labels(job).get(PROFILE_LABEL)
        if profile and not job["metadata"].get("deletionTimestamp"):
            groups[f"Job profile={profile}"] += 1
    for kind, component in (("Deployment", SERVING), ("ConfigMap", TABLE)):
        for obj in children.get(kind, ()):
            labels = _labels(obj)
            if labels.get(COMPONENT_LABEL) == component:
                groups[f"{kind} {labels.get(DEPLOYMENT_LABEL)}/{labels.get(POOL_LABEL)}"] += 1
    for svc in children.get("Service", ()):
        groups[f"Service {_labels(svc).get(DEPLOYMENT_LABEL)}"] += 1
    extra = {k: n for k, n in groups.items() if n > 1}
    detail = ", ".join(f"{k} x{n}" for k, n in sorted(extra.items()))
    return Check("I2", not extra, detail or "none", sum(n - 1 for n in extra.values()))


def orphans(children: Mapping[str, Sequence[Obj]], parent_uids: Iterable[str]) -> Check:
    """Managed objects whose SpeculativeDeployment owners are all gone (none existing)."""
    alive = set(parent_uids)
    found = []
    for kind, objects in children.items():
        for obj in objects:
            refs = [
                r
                for r in obj["metadata"].get("ownerReferences") or []
                if r.get("kind") == DEPLOYMENT_KIND
            ]
            if obj["metadata"].get("deletionTimestamp"):
                continue  # already being collected
            if not refs or not any(r.get("uid") in alive for r in refs):
                found.append(f"{kind}/{obj['metadata']['name']}")
    return Check("I3", not found, ", ".join(sorted(found)) or "none", len(found))


def convergence(seconds: float | None, *, bound: float | None = None, why: str = "") -> Check:
    """I4: converged within ``bound`` (default ``CONVERGENCE_BOUND_S``, times the time scale)."""
    if bound is None:
        bound = scaled(CONVERGENCE_BOUND_S)
    if seconds is None:
        return Check("I4", False, f"not converged within the wait ({why})")
    ok = seconds <= bound
    return Check(
        "I4",
        ok,
        f"{seconds:.1f} s (bound {bound:.0f} s){'; ' + why if why else ''}",
        round(seconds, 1),
    )


def steady(writes: Sequence[str], window_s: float) -> Check:
    detail = f"{len(writes)} write(s) in {window_s:.0f} s" + (
        f": {', '.join(writes[:8])}" if writes else ""
    )
    return Check("I5", not writes, detail, len(writes))


def collateral(before: Snapshot, after: Snapshot, intent: Intent) -> Check:
    problems = []
    low, high = intent.deployment_generation
    for name, (uid, generation) in before.deployments.items():
        now = after.deployments.get(name)
        if now is None:
            problems.append(f"Deployment {name} gone")
            continue
        if intent.deployment_uid_kept and now[0] != uid:
            problems.append(f"Deployment {name} re-created")
            continue
        if now[0] == uid and not low <= now[1] - generation <= high:
            problems.append(
                f"Deployment {name} generation {generation}->{now[1]} (intended +{low}..+{high})"
            )
    if intent.job_uid_kept:
        for name, uid in before.jobs.items():
            if after.jobs.get(name) != uid:
                problems.append(f"Job {name} {'re-created' if name in after.jobs else 'gone'}")
    jobs = len(before.jobs) if intent.job_uid_kept else 0
    kept = f"{len(before.deployments)} Deployment(s), {jobs} Job(s) as intended"
    return Check("I6", not problems, "; ".join(problems) or kept, len(problems))


def swallowed(log_text: str) -> Check:
    hits = [line for line in log_text.splitlines() if any(s in line for s in SWALLOWED)]
    detail = " | ".join(re.sub(r"\s+", " ", h)[:200] for h in hits[:3])
    return Check("I7", not hits, detail or "none", len(hits))
