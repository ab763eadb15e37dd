"""The chaos matrix's scenarios (review §5.3), each staged in a namespace of its own.

A scenario's ``stage`` sets the deployment up, injects the fault, clears it
and says what the world should converge to (``Staged``); ``run`` then hands
it to the oracle, which checks I1-I7. The ids follow the review's table
(C1a: the first reconcile; C1b: the reconcile that serves a landed profile;
C2, C3, C4, C7-C11, C18 and ``PROM``: Prometheus down). C16/C17 (two
replicas, an upgrade) belong to the leader-election work and are listed as
slots (``SLOTS``) that the runner reports as not run here.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from e2e.chaos import faults
from e2e.chaos import invariants as inv
from e2e.chaos.lab import L40S_NODES, NAME, Lab, example
from e2e.chaos.oracle import (
    Target,
    evaluate,
    now_utc,
    operator_writes,
    take_snapshot,
    write_counts,
)
from e2e.chaos.proxy import WRITE_METHODS, Action, Match, Rule
from e2e.localcluster import cluster as cluster_mod
from e2e.localcluster.waiting import wait_for
from specdeploy.operator.config import utc_now
from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan
from specdeploy.operator.observed import Observed
from specdeploy.operator.reactor.leader import EXIT_LOST
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
RESTART_AFTER_S = 2.0


@dataclass
class Staged:
    target: Target
    intent: inv.Intent
    before: inv.Snapshot
    cleared: datetime
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    stage: Callable[[Lab, str], Staged]


@dataclass
class Outcome:
    id: str
    title: str
    passed: bool
    checks: list[inv.Check]
    convergence_s: float | None
    writes: dict[str, int]
    wall_s: float
    notes: list[str]
    error: str | None = None


# --- shared steps ------------------------------------------------------------------


def _writes_in(namespace: str) -> Match:
    return Match(method=WRITE_METHODS, path=f"/namespaces/{namespace}/")


def _wait_fired(rule: Rule, timeout: float, what: str) -> None:
    wait_for(lambda: rule.fired > 0, what=what, timeout=timeout)


def _kill_restart(lab: Lab, rule: Rule, timeout: float, what: str) -> list[str]:
    """Wait for the kill rule to fire, then restart the operator RESTART_AFTER_S later."""
    _wait_fired(rule, timeout, what)
    wait_for(lambda: not lab.operator_alive(), what="the operator to die", timeout=15)
    time.sleep(RESTART_AFTER_S)
    lab.start_operator()
    return [f"killed after: {rule.fired_on[0]}"]


def first_reconcile_length(lab: Lab, namespace: str, body: Obj) -> int:
    """How many requests the first reconcile of ``body`` sends, by the operator's pure plan."""
    fake = {
        **body,
        "metadata": {**body["metadata"], "namespace": namespace, "uid": "u-0", "generation": 1},
    }
    observed = Observed(nodes=lab.admin.items(paths.path("Node")))
    now = utc_now()
    decision = decide(fake, observed, now=now, config=lab.env.config)
    return len(plan(fake, decision, observed, now=now))


RECONCILE = re.compile(r": (?P<key>[^ ]+): reconciled, (?P<n>\d+) request\(s\)")


def serving_reconcile_writes(log_text: str, namespace: str) -> tuple[int, int]:
    """(child and status writes, events) of the reconcile that applied the table ConfigMap.

    Read from the operator's own log lines. A reconcile sends its children, then its
    status, then its events; how many events it sends depends on timing (the telemetry
    loop's first interval may add ``NothingToObserve``), so the two are counted apart.
    """
    writes = events = 0
    seen_table = False
    for line in log_text.splitlines():
        if f" {namespace}/{NAME}: " not in line:
            continue
        if RECONCILE.search(line):
            if seen_table:
                return writes, events
            writes = events = 0
            continue
        if f"{namespace}/{NAME}: event " in line:
            events += 1
        else:
            writes += 1
        if "apply ConfigMap" in line:
            seen_table = True
    raise LookupError(f"no reconcile applying a ConfigMap in {namespace}'s log lines")


def _ready(lab: Lab, namespace: str, *, discovery: bool = False) -> None:
    lab.create(namespace, example(discovery=discovery))
    lab.wait_phase(namespace, "Ready", timeout=120)
    time.sleep(2.0)  # the last events of the rollout


READY = Target(NAME, ("Ready",), {"Deployment": 1, "ConfigMap": 1, "Service": 1})


def _profiling_target() -> Target:
    return Target(
        NAME,
        ("Profiling",),
        {"Service": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "Job": 1},
    )


# --- C1: SIGKILL between two writes ---------------------------------------------------


def c1a(n: int) -> Callable[[Lab, str], Staged]:
    def stage(lab: Lab, ns: str) -> Staged:
        with lab.held(ns) as hold:
            body = example(hold=hold)
            total = first_reconcile_length(lab, ns, body)
            if n > total:
                raise ValueError(f"n={n} beyond the first reconcile's {total} requests")
            rule = lab.proxy.add(
                Rule(
                    Action.KILL_AFTER_FORWARD, _writes_in(ns), nth=n, on_fire=lab.operator_killer()
                )
            )
            lab.create(ns, body)
            notes = _kill_restart(lab, rule, 30, f"write {n} of the first reconcile")
            before = take_snapshot(lab.env, ns)  # what existed at the crash must survive
            notes.append(f"first reconcile: {total} requests (the operator's pure plan)")
            return Staged(
                _profiling_target(), inv.Intent(job_uid_kept=True), before, now_utc(), notes
            )

    return stage


def c1b(n: int) -> Callable[[Lab, str], Staged]:
    def stage(lab: Lab, ns: str) -> Staged:
        with lab.held(ns) as hold:
            lab.create(ns, example(hold=hold))
            lab.wait_phase(ns, "Profiling", timeout=60)
            time.sleep(2.0)
            rule = lab.proxy.add(
                Rule(
                    Action.KILL_AFTER_FORWARD,
                    _writes_in(ns),
                    nth=n,
                    arm=Match("PATCH", r"/configmaps/"),
                    on_fire=lab.operator_killer(),
                )
            )
            lab.label_nodes(hold, "true")
            notes = _kill_restart(lab, rule, 90, f"write {n} of the serving reconcile")
            before = take_snapshot(lab.env, ns)
            return Staged(READY, inv.Intent(deployment_generation=(0, 1)), before, now_utc(), notes)

    return stage


def c0_baseline(lab: Lab, ns: str) -> Staged:
    """No fault: the oracle's own baseline, and the serving reconcile's length for C1b."""
    with lab.held(ns) as hold:
        offset = lab.env.log_offset()
        lab.create(ns, example(hold=hold))
        lab.wait_phase(ns, "Profiling", timeout=60)
        before = take_snapshot(lab.env, ns)
        lab.label_nodes(hold, "true")
        lab.wait_phase(ns, "Ready", timeout=90)
        time.sleep(2.0)
        writes, events = serving_reconcile_writes(lab.env.log_since(offset), ns)

        def c1b_covers_it() -> str | None:
            # C1b kills after each of its first C1B_WRITES requests; the child and status
            # writes come first, so those must fit inside them, and the rest are events.
            if writes != C1B_CHILD_WRITES or writes + events < C1B_WRITES:
                return (
                    f"serving reconcile {writes} writes + {events} events, C1b expects "
                    f"{C1B_CHILD_WRITES} + at least {C1B_WRITES - C1B_CHILD_WRITES}"
                )
            return None

        target = Target(NAME, ("Ready",), READY.expect, extra=c1b_covers_it)
        notes = [f"serving reconcile: {writes} writes, {events} events"]
        return Staged(target, inv.Intent(), before, now_utc(), notes)


# --- C2, C18: control-plane processes -------------------------------------------------


def c2_component(name: str, down_s: float) -> Callable[[Lab, str], Staged]:
    def stage(lab: Lab, ns: str) -> Staged:
        _ready(lab, ns)
        before = take_snapshot(lab.env, ns)
        faults.kill(lab.cluster, name)
        time.sleep(down_s)
        faults.restart(lab.cluster, name)
        lab.wait_api()
        notes = [f"{name} SIGKILLed, down {down_s:.0f} s, restarted with its argv"]
        if not lab.operator_alive():
            notes.append("the operator process exited while the API was down")
        return Staged(READY, inv.Intent(), before, now_utc(), notes)

    return stage


def c2_apiserver_profiling(lab: Lab, ns: str) -> Staged:
    with lab.held(ns) as hold:
        lab.create(ns, example(hold=hold))
        lab.wait_phase(ns, "Profiling", timeout=60)
        before = take_snapshot(lab.env, ns)
        faults.kill(lab.cluster, "kube-apiserver")
        time.sleep(10)
        faults.restart(lab.cluster, "kube-apiserver")
        lab.wait_api()
        lab.label_nodes(hold, "true")
        target = Target(NAME, ("Ready",), READY.expect, extra=_one_job_created(lab, ns))
        return Staged(
            target, inv.Intent(), before, now_utc(), ["API server down 10 s mid-profiling"]
        )


def _one_job_created(lab: Lab, ns: str) -> Callable[[], str | None]:
    since = now_utc().replace(year=2000)

    def check() -> str | None:
        creates = [w for w in operator_writes(lab.env, ns, since) if w.what == "create jobs"]
        return None if len(creates) <= 1 else f"{len(creates)} Jobs created"

    return check


def c18_controller_manager(lab: Lab, ns: str) -> Staged:
    with lab.held(ns) as hold:
        lab.create(ns, example(hold=hold))
        lab.wait_phase(ns, "Profiling", timeout=60)
        before = take_snapshot(lab.env, ns)
        faults.kill(lab.cluster, "kube-controller-manager")
        lab.label_nodes(hold, "true")  # the profiler runs and its pod ends; no one marks the Job
        time.sleep(20)
        faults.restart(lab.cluster, "kube-controller-manager")
        target = Target(NAME, ("Ready",), READY.expect, extra=_one_job_created(lab, ns))
        notes = ["controller-manager SIGKILLed while the profiling Job completed, down 20 s"]
        return Staged(target, inv.Intent(), before, now_utc(), notes)


# --- Prometheus down ------------------------------------------------------------------


def _condition(lab: Lab, ns: str, kind: str) -> Obj | None:
    for cond in lab.status(ns).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def prometheus_down(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns)
    before = take_snapshot(lab.env, ns)
    (table,) = lab.managed("ConfigMap", ns)
    faults.kill(lab.cluster, "prometheus")
    notes = ["Prometheus SIGKILLed"]
    try:
        wait_for(
            lambda: (_condition(lab, ns, "TelemetryHealthy") or {}).get("status") == "False",
            what="TelemetryHealthy False",
            timeout=90,
        )
        notes.append("TelemetryHealthy False while down")
    except Exception as err:  # recorded: the scenario's extra check fails below
        notes.append(f"TelemetryHealthy never False: {err}")
    (frozen,) = lab.managed("ConfigMap", ns)
    frozen_ok = frozen["metadata"]["resourceVersion"] == table["metadata"]["resourceVersion"]
    notes.append(
        "table unchanged while down" if frozen_ok else "table CHANGED while Prometheus down"
    )
    cluster_mod.start_prometheus(lab.cluster, log=lambda _m: None)
    cleared = now_utc()

    def recovered() -> str | None:
        if not frozen_ok:
            return "the table changed while Prometheus was down"
        if not any("TelemetryHealthy False while down" in n for n in notes):
            return "TelemetryHealthy was never False"
        status = (_condition(lab, ns, "TelemetryHealthy") or {}).get("status")
        return None if status != "False" else "TelemetryHealthy still False"

    target = Target(NAME, ("Ready",), READY.expect, extra=recovered)
    return Staged(target, inv.Intent(), before, cleared, notes)


# --- C9: the serving node -------------------------------------------------------------


def _serving_node(lab: Lab, ns: str) -> str:
    pods = [p for p in lab.managed("Pod", ns) if p["spec"].get("nodeName")]
    serving = [p for p in pods if "table" not in p["metadata"]["name"]]
    return str(serving[0]["spec"]["nodeName"])


def _uids_kept(lab: Lab, ns: str, kinds: tuple[str, ...]) -> Callable[[], str | None]:
    before = {(k, o["metadata"]["uid"]) for k in kinds for o in lab.managed(k, ns)}

    def check() -> str | None:
        now = {(k, o["metadata"]["uid"]) for k in kinds for o in lab.managed(k, ns)}
        lost = sorted(k for k, _ in before - now)
        return f"re-created or gone: {lost}" if lost else None

    return check


def c9_node_removed(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns, discovery=True)
    before = take_snapshot(lab.env, ns)
    kept = _uids_kept(lab, ns, ("Deployment", "ConfigMap"))
    node = _serving_node(lab, ns)
    lab.admin.delete(paths.path("Node", name=node))
    time.sleep(10)
    names = cluster_mod.register_fleet(lab.admin, lab.fleet)
    cluster_mod.wait_nodes_ready(lab.admin, names)
    target = Target(NAME, ("Ready",), READY.expect, extra=kept)
    return Staged(
        target, inv.Intent(), before, now_utc(), [f"node {node} deleted 10 s, re-registered"]
    )


def _allocatable(lab: Lab, gpus: str) -> None:
    for node in L40S_NODES:
        lab.admin.request(
            "PATCH",
            paths.path("Node", name=node) + "/status",
            body={"status": {"allocatable": {"nvidia.com/gpu": gpus}}},
            content_type="application/merge-patch+json",
        )


def c9_allocatable_zero(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns, discovery=True)
    before = take_snapshot(lab.env, ns)
    kept = _uids_kept(lab, ns, ("Deployment", "ConfigMap"))
    _allocatable(lab, "0")
    time.sleep(10)
    _allocatable(lab, "8")
    target = Target(NAME, ("Ready",), READY.expect, extra=kept)
    return Staged(target, inv.Intent(), before, now_utc(), ["L40S allocatable 0 for 10 s, then 8"])


# --- C8: the profiling pod evicted ----------------------------------------------------


def c8_evicted(lab: Lab, ns: str) -> Staged:
    with lab.held(ns) as hold:
        lab.create(ns, example(hold=hold))
        lab.wait_phase(ns, "Profiling", timeout=60)
        (pod,) = wait_for(
            lambda: lab.managed("Pod", ns) or None, what="the profiler pod", timeout=30
        )
        before = take_snapshot(lab.env, ns)
        name = pod["metadata"]["name"]
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        }
        lab.admin.post(paths.path("Pod", ns, name) + "/eviction", eviction)
        time.sleep(3)
        (job,) = lab.managed("Job", ns)
        failed = int((job.get("status") or {}).get("failed") or 0)
        lab.label_nodes(hold, "true")

        def one_profile() -> str | None:
            if failed:
                return f"the eviction counted as a failure (Job status.failed {failed})"
            profiles = lab.admin.items(paths.path("SpeculationProfile", ns))
            return None if len(profiles) == 1 else f"{len(profiles)} profiles"

        target = Target(NAME, ("Ready",), READY.expect, extra=one_profile)
        return Staged(
            target, inv.Intent(), before, now_utc(), [f"pod {name} evicted (Eviction API)"]
        )


# --- C10, C11: hand edits and deletions -------------------------------------------------


def c10_profile_deleted(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns)
    before = take_snapshot(lab.env, ns)
    (profile,) = lab.admin.items(paths.path("SpeculationProfile", ns))
    lab.admin.delete(paths.path("SpeculationProfile", ns, profile["metadata"]["name"]))
    since = now_utc()

    def recreated() -> str | None:
        if (
            lab.admin.get_or_none(paths.path("SpeculationProfile", ns, profile["metadata"]["name"]))
            is None
        ):
            return "profile not re-created"
        creates = [w for w in operator_writes(lab.env, ns, since) if w.what == "create jobs"]
        return None if len(creates) == 1 else f"{len(creates)} Jobs created (1 wanted)"

    target = Target(NAME, ("Ready",), READY.expect, extra=recreated)
    return Staged(target, inv.Intent(), before, since, ["SpeculationProfile deleted by hand"])


def _table(lab: Lab, ns: str) -> Obj:
    (cm,) = lab.managed("ConfigMap", ns)
    return dict(cm)


def c11_configmap_edited(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns)
    before = take_snapshot(lab.env, ns)
    cm = _table(lab, ns)
    data = dict(cm.get("data") or {})
    key = sorted(data)[0]
    lab.admin.merge_patch(
        paths.path("ConfigMap", ns, cm["metadata"]["name"]), {"data": {key: "{}"}}
    )

    def reverted() -> str | None:
        return None if _table(lab, ns).get("data") == data else "table ConfigMap not reverted"

    target = Target(NAME, ("Ready",), READY.expect, extra=reverted)
    return Staged(target, inv.Intent(), before, now_utc(), [f"ConfigMap data[{key}] overwritten"])


def c11_configmap_deleted(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns)
    before = take_snapshot(lab.env, ns)
    cm = _table(lab, ns)
    lab.admin.delete(paths.path("ConfigMap", ns, cm["metadata"]["name"]))
    return Staged(READY, inv.Intent(), before, now_utc(), ["table ConfigMap deleted"])


def _image(deployment: Obj) -> str:
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def c11_deployment_edited(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns)
    before = take_snapshot(lab.env, ns)
    (dep,) = lab.managed("Deployment", ns)
    image = _image(dep)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": dep["spec"]["template"]["spec"]["containers"][0]["name"],
                            "image": "example.invalid/hand-edit:1",
                        }
                    ]
                }
            }
        }
    }
    lab.admin.request(
        "PATCH",
        paths.path("Deployment", ns, dep["metadata"]["name"]),
        body=patch,
        content_type="application/strategic-merge-patch+json",
    )

    def reverted() -> str | None:
        (now,) = lab.managed("Deployment", ns)
        return None if _image(now) == image else f"image still {_image(now)}"

    target = Target(NAME, ("Ready",), READY.expect, extra=reverted)
    # The edit is +1, the revert +1: exactly two, no churn beyond.
    intent = inv.Intent(deployment_generation=(2, 2))
    return Staged(target, intent, before, now_utc(), ["serving Deployment image edited by hand"])


def c11_deployment_deleted(lab: Lab, ns: str) -> Staged:
    _ready(lab, ns)
    before = take_snapshot(lab.env, ns)
    (dep,) = lab.managed("Deployment", ns)
    lab.admin.delete(paths.path("Deployment", ns, dep["metadata"]["name"]))
    intent = inv.Intent(deployment_uid_kept=False)
    return Staged(READY, intent, before, now_utc(), ["serving Deployment deleted by hand"])


# --- C7: a missed event -----------------------------------------------------------------


def c7_rolebinding_deleted(lab: Lab, ns: str) -> Staged:
    with lab.held(ns) as hold:
        lab.create(ns, example(hold=hold))
        lab.wait_phase(ns, "Profiling", timeout=60)
        time.sleep(2)
        before = take_snapshot(lab.env, ns)
        lab.admin.delete(paths.path("RoleBinding", ns, "specdeploy-profiler"))
        return Staged(
            _profiling_target(),
            inv.Intent(job_uid_kept=True),
            before,
            now_utc(),
            ["profiler RoleBinding deleted by hand"],
        )


# --- C3, C4: API faults through the proxy ------------------------------------------------


def c3_errors(lab: Lab, ns: str) -> Staged:
    rule = lab.proxy.add(Rule(Action.STATUS, _writes_in(ns), status=503))
    lab.create(ns, example())
    time.sleep(30)
    lab.proxy.remove(rule)
    notes = [f"every write answered 503 for 30 s ({rule.fired} refused)"]
    return Staged(READY, inv.Intent(), inv.Snapshot(), now_utc(), notes)


def c3_retry_after(lab: Lab, ns: str) -> Staged:
    rule = lab.proxy.add(Rule(Action.STATUS, _writes_in(ns), times=1, status=429, retry_after=20))
    lab.create(ns, example())
    _wait_fired(rule, 30, "the 429")
    fired_at = time.time()
    time.sleep(25)

    def respected() -> str | None:
        early = [
            s
            for s in lab.proxy.seen
            if fired_at < s.at < fired_at + 19.0
            and f"/namespaces/{ns}/" in s.path
            and s.method in WRITE_METHODS.split("|")
        ]
        return None if not early else f"{len(early)} write(s) within 20 s of Retry-After: 20"

    target = Target(NAME, ("Ready",), READY.expect, extra=respected)
    return Staged(target, inv.Intent(), inv.Snapshot(), now_utc(), ["one 429 with Retry-After: 20"])


def c4_truncated(lab: Lab, ns: str) -> Staged:
    lists = Match("GET", f"/namespaces/{ns}/", watch=False)
    truncate = lab.proxy.add(Rule(Action.TRUNCATE, lists, every=5, truncate_bytes=40))
    reset = lab.proxy.add(
        Rule(Action.RESET, Match(".*", f"/namespaces/{ns}/", watch=False), every=10)
    )
    names = [f"{NAME}-{i}" for i in range(3)]
    for name in names:
        lab.create(ns, example(name))
    time.sleep(30)
    lab.proxy.remove(truncate)
    lab.proxy.remove(reset)
    notes = [
        f"{truncate.fired} LIST/GET bodies truncated, {reset.fired} connections reset over 30 s"
    ]

    def all_ready() -> str | None:
        phases = {n: lab.status(ns, n).get("phase") for n in names}
        return None if set(phases.values()) == {"Ready"} else f"phases {phases}"

    target = Target(
        names[0], ("Ready",), {"Deployment": 3, "ConfigMap": 3, "Service": 3}, extra=all_ready
    )
    return Staged(target, inv.Intent(), inv.Snapshot(), now_utc(), notes)


# --- the matrix ----------------------------------------------------------------------------


C1A_WRITES = 8
"""Requests of the first reconcile of the held one-pool example (Service, SA, Role,
RoleBinding, Job, status, 2 events); ``first_reconcile_length`` recomputes it each run
and a scenario with n beyond it fails by name."""
C1B_CHILD_WRITES = 8
"""Child and status writes of the serving reconcile (ConfigMap, Deployment, PDB, Job and
3 RBAC deletes, status), as C0's baseline measures them from the operator's log."""
C1B_WRITES = C1B_CHILD_WRITES + 2
"""C1b's kill points: every child and status write, and the two events that always follow
(a third, timing-dependent one is not a kill point)."""


def matrix() -> list[Scenario]:
    """Every scenario (``make test`` runs the two that conftest.py's tier table names)."""
    found = [Scenario("C0", "baseline: no fault (oracle self-check)", c0_baseline)]
    found += [
        Scenario(
            f"C1a-n{n}",
            f"SIGKILL after write {n} of the first reconcile",
            c1a(n),
        )
        for n in range(1, C1A_WRITES + 1)
    ]
    found += [
        Scenario(
            f"C1b-n{n}",
            f"SIGKILL after write {n} of the profile-landed reconcile",
            c1b(n),
        )
        for n in range(1, C1B_WRITES + 1)
    ]
    found += [
        Scenario(
            "C2-apiserver",
            "kube-apiserver SIGKILL, down 10 s, Ready",
            c2_component("kube-apiserver", 10),
        ),
        Scenario(
            "C2-apiserver-60s",
            "kube-apiserver SIGKILL, down 60 s, Ready",
            c2_component("kube-apiserver", 60),
        ),
        Scenario(
            "C2-apiserver-profiling",
            "kube-apiserver SIGKILL 10 s mid-profiling",
            c2_apiserver_profiling,
        ),
        Scenario("C2-etcd", "etcd SIGKILL, down 10 s, Ready", c2_component("etcd", 10)),
        Scenario(
            "C18", "controller-manager SIGKILL 20 s while the Job completes", c18_controller_manager
        ),
        Scenario(
            "PROM",
            "Prometheus down: TelemetryHealthy False, table frozen, recovery",
            prometheus_down,
        ),
        Scenario(
            "C9-node",
            "serving node deleted, re-registered (discovery)",
            c9_node_removed,
        ),
        Scenario("C9-alloc0", "allocatable GPUs 0 for 10 s (discovery)", c9_allocatable_zero),
        Scenario("C8", "profiling pod evicted (Eviction API)", c8_evicted),
        Scenario("C10", "SpeculationProfile deleted by hand while Ready", c10_profile_deleted),
        Scenario("C11-cm-edit", "table ConfigMap edited by hand", c11_configmap_edited),
        Scenario("C11-cm-delete", "table ConfigMap deleted by hand", c11_configmap_deleted),
        Scenario(
            "C11-dep-edit", "serving Deployment template edited by hand", c11_deployment_edited
        ),
        Scenario("C11-dep-delete", "serving Deployment deleted by hand", c11_deployment_deleted),
        Scenario(
            "C7",
            "profiler RoleBinding deleted by hand (unwatched kind)",
            c7_rolebinding_deleted,
        ),
        Scenario("C3-503", "every write 503 for 30 s", c3_errors),
        Scenario("C3-429", "429 with Retry-After: 20", c3_retry_after),
        Scenario("C4", "20% of GETs truncated, 10% of requests reset, 3 deployments", c4_truncated),
    ]
    return found


SLOTS = {
    "C16": "two operator replicas at once (leader election): branch `leader`, another helper's",
    "C17": "rolling upgrade with both versions running: branch `leader`, another helper's",
}


LEASE_LOST = f"exiting with status {EXIT_LOST}"


def _operator_exit(log_text: str) -> inv.Check:
    """An operator that exited: by design only when it could not renew its Lease within
    the renew deadline (the API down longer than that), which stops a leader that may have
    been replaced from writing on; the lab then restarts it as its Deployment would. Any
    other exit is a crash."""
    if LEASE_LOST in log_text:
        why = "it stopped leading when its Lease could not be renewed (by design); restarted"
        return inv.Check("OP", True, why)
    return inv.Check("OP", False, "the operator process had exited; restarted")


def run(lab: Lab, scenario: Scenario) -> Outcome:
    """Stage one scenario in a fresh namespace and judge it; the namespace is deleted after."""
    started = time.monotonic()
    since = now_utc()
    offset = lab.env.log_offset()
    ns = ""
    lab.ensure_operator()
    try:
        ns = lab.namespace(scenario.id)
        staged = scenario.stage(lab, ns)
        revived = lab.revive_control_plane()
        if revived:
            staged.notes.append(
                f"harness: restarted control-plane component(s) that died: {revived}"
            )
        extra: list[inv.Check] = []
        if lab.ensure_operator():
            extra.append(_operator_exit(lab.env.log_since(offset)))
        checks, seconds = evaluate(
            lab.env,
            ns,
            staged.target,
            cleared=staged.cleared,
            log_offset=offset,
            before=staged.before,
            intent=staged.intent,
            steady_s=lab.steady_s,
        )
        checks = extra + checks
        writes = write_counts(operator_writes(lab.env, ns, since))
        passed = all(c.ok for c in checks)
        return Outcome(
            scenario.id,
            scenario.title,
            passed,
            checks,
            seconds,
            writes,
            round(time.monotonic() - started, 1),
            staged.notes,
        )
    except Exception as err:
        detail = "".join(traceback.format_exception_only(err)).strip()
        return Outcome(
            scenario.id,
            scenario.title,
            False,
            [],
            None,
            {},
            round(time.monotonic() - started, 1),
            [traceback.format_exc()[-1500:]],
            detail,
        )
    finally:
        lab.proxy.clear()
        lab.ensure_operator()
        lab.release_holds()
        for name in lab.revive_control_plane():
            print(f"chaos: {scenario.id}: harness restarted {name}, which had died", flush=True)
        if ns:
            lab.drop_namespace(ns)
