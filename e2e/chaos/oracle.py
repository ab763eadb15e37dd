"""The convergence oracle (review §5.1 #6): wait for quiescence, then check I1-I7.

Quiescence is read from the API server's audit log, not from the operator:
no write by the operator's identity in the scenario's namespace for
``QUIET_S`` seconds. The wanted children come from the operator's own pure
``decide`` run on a fresh ``gather`` (with the admin's client): after a
fault, the pure function of the world as it now is says what should exist,
and ``plan_children`` says which child writes are still to do (none, once
converged). The scenario adds what it expects on top (the kinds a Ready
pool has), so an oracle that agreed with a broken decide would still fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e.chaos import invariants as inv
from e2e.localcluster import audit
from e2e.localcluster.cluster import Cluster
from e2e.localcluster.kubeapi import KubeApi
from specdeploy.operator.builders.common import MANAGED_BY
from specdeploy.operator.clients import k8s
from specdeploy.operator.config import Config, utc_now
from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan_children
from specdeploy.operator.manifests import ref_of
from specdeploy.operator.observed import CHILD_KINDS, OPTIONAL_KINDS
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
TELEMETRY_INTERVAL_S = 10
"""The telemetry interval of the scenarios' deployments (``lab.example``): the operator's
shortest (``telemetry.interval.MIN_SECONDS``; a shorter spec is clamped to it)."""
QUIET_S = 2.5 * TELEMETRY_INTERVAL_S
"""Longer than two telemetry intervals of the scenarios' deployments: after a restart the
loop's pool health moves Unknown (SeriesPending) to a verdict one interval later, a real
change written then; a shorter quiet took that for steady-state writes."""
CONVERGE_WAIT_S = 150.0
"""How long the oracle waits before it calls a scenario unconverged (beyond the 60 s bound,
so that a slow convergence is measured rather than cut off)."""
GC_SETTLE_S = 60.0
MANAGED = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
SDEP = "SpeculativeDeployment"


@dataclass(frozen=True)
class Env:
    """What the oracle reads: the cluster, an admin client, the operator's audit identity."""

    cluster: Cluster
    admin: KubeApi
    operator_user: str
    config: Config

    @property
    def audit_log(self) -> Path:
        return self.cluster.layout.audit_log

    @property
    def operator_log(self) -> Path:
        return self.cluster.layout.log("operator")

    def log_offset(self) -> int:
        path = self.operator_log
        return path.stat().st_size if path.exists() else 0

    def log_since(self, offset: int) -> str:
        with self.operator_log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")


def now_utc() -> datetime:
    return datetime.now(UTC)


def operator_writes(
    env: Env, namespace: str, since: datetime, until: datetime | None = None
) -> list[audit.Write]:
    """The operator's writes in ``namespace`` (and its deployments' status) in [since, until)."""
    return [
        w
        for w in audit.read_writes(env.audit_log)
        if audit.is_operator(w, env.operator_user)
        and w.namespace == namespace
        and w.at >= since
        and (until is None or w.at < until)
    ]


def children(admin: KubeApi, namespace: str) -> dict[str, list[Obj]]:
    """The namespace's managed objects by kind; none of an API the cluster does not serve
    (KEDA's, unless an earlier test installed its CRD: run alone, the chaos suite met a 404)."""
    found: dict[str, list[Obj]] = {}
    for kind in CHILD_KINDS:
        try:
            found[kind] = admin.items(paths.path(kind, namespace), labelSelector=MANAGED)
        except k8s.ApiError as err:
            if kind not in OPTIONAL_KINDS or err.status != 404:
                raise
            found[kind] = []
    return found


def wanted_and_pending(
    env: Env, namespace: str, name: str
) -> tuple[set[tuple[str, str]], list[str]]:
    """The children decide wants for the deployment now, and the child writes left to do."""
    body, observed = k8s.gather(env.admin.client, namespace, name)
    if body is None:
        return set(), []
    decision = decide(body, observed, now=utc_now(), config=env.config)
    wanted = {ref_of(m) for m in (*decision.owned, *decision.shared)} | set(decision.keep)
    return wanted, [r.what for r in plan_children(body, decision, observed)]


def existing_refs(found: dict[str, list[Obj]]) -> set[tuple[str, str]]:
    return {(kind, o["metadata"]["name"]) for kind, objs in found.items() for o in objs}


@dataclass
class Target:
    """The state a scenario converges to: phases allowed, and the kinds each pool needs."""

    name: str
    phases: tuple[str, ...] = ("Ready",)
    expect: dict[str, int] = field(default_factory=dict)
    """At least this many managed objects of each kind (the scenario's own wanted set)."""
    extra: Callable[[], str | None] | None = None
    """A scenario-specific condition: None when it holds, else why not."""


def _state(env: Env, namespace: str, target: Target) -> tuple[bool, str]:
    obj = env.admin.get_or_none(paths.path(SDEP, namespace, target.name))
    if obj is None:
        return False, "deployment gone"
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation")
    if status.get("observedGeneration") != generation:
        return False, f"observedGeneration {status.get('observedGeneration')} != {generation}"
    if status.get("phase") not in target.phases:
        return False, f"phase {status.get('phase')} not in {target.phases}"
    wanted, pending = wanted_and_pending(env, namespace, target.name)
    if pending:
        return False, f"child writes left: {pending}"
    found = children(env.admin, namespace)
    missing = wanted - existing_refs(found)
    if missing:
        return False, f"missing {sorted(missing)}"
    for kind, least in target.expect.items():
        live = [o for o in found.get(kind, []) if not o["metadata"].get("deletionTimestamp")]
        if len(live) < least:
            return False, f"{len(live)} {kind}(s), expected {least}"
    if target.extra is not None:
        problem = target.extra()
        if problem:
            return False, problem
    return True, "ok"


@dataclass
class Converged:
    seconds: float | None
    why: str
    at: datetime


def wait_converged(env: Env, namespace: str, target: Target, cleared: datetime) -> Converged:
    """Poll until the target holds and the operator has been quiet for QUIET_S seconds."""
    deadline = time.monotonic() + CONVERGE_WAIT_S
    first_ok: datetime | None = None
    why = ""
    while time.monotonic() < deadline:
        ok, why = _state(env, namespace, target)
        now = now_utc()
        if not ok:
            first_ok = None
        else:
            first_ok = first_ok or now
            writes = operator_writes(env, namespace, cleared)
            last = max((w.at for w in writes), default=cleared)
            if (now - last).total_seconds() >= QUIET_S and (now - first_ok).total_seconds() >= 1.0:
                reached = max(first_ok, last)
                return Converged((reached - cleared).total_seconds(), "", now)
        time.sleep(1.0)
    return Converged(None, why, now_utc())


def wait_no_orphans(env: Env, namespace: str) -> inv.Check:
    """I3, after giving the garbage collector GC_SETTLE_S seconds to settle."""
    deadline = time.monotonic() + GC_SETTLE_S
    while True:
        parents = [o["metadata"]["uid"] for o in env.admin.items(paths.path(SDEP, namespace))]
        check = inv.orphans(children(env.admin, namespace), parents)
        if check.ok or time.monotonic() > deadline:
            return check
        time.sleep(2.0)


def evaluate(
    env: Env,
    namespace: str,
    target: Target,
    *,
    cleared: datetime,
    log_offset: int,
    before: inv.Snapshot,
    intent: inv.Intent,
    steady_s: float,
) -> tuple[list[inv.Check], float | None]:
    """Every invariant for one scenario: (checks, convergence seconds)."""
    converged = wait_converged(env, namespace, target, cleared)
    checks = [inv.convergence(converged.seconds, why=converged.why)]
    found = children(env.admin, namespace)
    wanted, _ = wanted_and_pending(env, namespace, target.name)
    checks.append(inv.lost(wanted, existing_refs(found)))
    checks.append(inv.duplicates(found))
    checks.append(wait_no_orphans(env, namespace))
    window_start = now_utc()
    time.sleep(steady_s)
    window = operator_writes(env, namespace, window_start, now_utc())
    checks.append(inv.steady([w.what for w in window], steady_s))
    found = children(env.admin, namespace)
    after = inv.snapshot(found.get("Deployment", []), found.get("Job", []))
    checks.append(inv.collateral(before, after, intent))
    checks.append(inv.swallowed(env.log_since(log_offset)))
    return sorted(checks, key=lambda c: c.id), converged.seconds


def take_snapshot(env: Env, namespace: str) -> inv.Snapshot:
    found = children(env.admin, namespace)
    return inv.snapshot(found.get("Deployment", []), found.get("Job", []))


def write_counts(writes: Iterable[audit.Write]) -> dict[str, int]:
    return dict(audit.count(list(writes)))


def first_failing(checks: Sequence[inv.Check]) -> str | None:
    bad = [c.id for c in checks if not c.ok]
    return ",".join(bad) if bad else None
