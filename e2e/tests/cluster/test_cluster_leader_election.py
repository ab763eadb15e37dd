"""Two operator processes against one cluster: one leads and writes, the other waits (review M1).

Chaos C16 and C17 on the local control plane. Real: the API server (its
RBAC, the Lease's optimistic lock, the audit log of writes), the
controller-manager, the operator as two processes (``specdeploy operator
run``, leader election on, as by default) and the profiler. Each process
runs under a ServiceAccount of its own bound to the ClusterRole the
operator generates (``operator_cluster_role``), so the audit log tells
their writes apart by user; the Lease lives in the test's namespace, so no
other operator of the session shares it. A Lease holder is
``hostname_pid_suffix``: its pid names the process.

* C16a (same build): the standby writes nothing at all while the leader
  brings the example to Ready; no Event is doubled; the serving Deployment's
  generation holds still; after ``kill -9`` of the leader the standby takes
  over within the lease duration plus a margin and rolls out a change made
  meanwhile.
* C16b/C17 (skewed builds, a rolling upgrade): the new build renders the pod
  template differently (an annotation, put in by a launcher that wraps the
  builder: the "new version"); it starts beside the old one, which is stopped
  30 s later. The new rendering lands once, and nothing flips it back.

Emulated: the serving pods (KWOK) and the GPUs (the profiler's sim backend).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import audit, cluster, kubeconfig, objects, processes
from e2e.localcluster.binaries import Binaries, repo_root
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.scrape import family_total
from e2e.localcluster.waiting import wait_for
from e2e.tests.cluster.test_operator_lifecycle import (
    children,
    create,
    example,
    sdep_path,
    status,
    wait_phase,
)
from e2e.time_scale import scaled
from specdeploy.operator.builders.rbac import operator_cluster_role
from specdeploy.runtime.kube import paths

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
NAME = "llama-8b-chat"
LEASE = "specdeploy-operator"
LEASE_DURATION = 15.0
TAKEOVER_MARGIN = 20.0
"""Beyond the lease duration: a standby sees the last renewal up to 2 x 2.2 s late and
retries up to 2.2 s x 2 later; the rest is this shared box's slack."""
READY_TIMEOUT = 240.0
BUILD_ANNOTATION = "specdeploy.io/test-build"
SKEWED_BUILD = f"""
import sys
from specdeploy.operator.pool import children
from specdeploy.cli import main

built = children.serving_deployment

def skewed(*args, **kwargs):
    deployment = built(*args, **kwargs)
    deployment["spec"]["template"]["metadata"]["annotations"]["{BUILD_ANNOTATION}"] = "new"
    return deployment

children.serving_deployment = skewed
sys.exit(main())
"""
"""The "new version": the same CLI, with a serving builder that renders one more annotation."""


# --- the two replicas ---------------------------------------------------------------


@dataclass(frozen=True)
class Replica:
    """One operator process: its component name, identity and ports."""

    name: str
    user: str
    kubeconfig: Path
    liveness_port: int
    metrics_port: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_replica(
    admin: KubeApi, running: cluster.Cluster, namespace: str, account: str, role: str, tmp: Path
) -> Replica:
    """A ServiceAccount bound to the operator's ClusterRole, and a kubeconfig with its token."""
    admin.create(objects.service_account(account, namespace))
    admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{role}-{account}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
    )
    token = tmp / f"{account}.token"
    token.write_text(admin.request_token(namespace, account, seconds=3600))
    doc = kubeconfig.document(
        server=running.state.server,
        ca_file=running.layout.pki.ca_cert,
        user=account,
        token_file=token,
    )
    return Replica(
        name=f"operator-{account}",
        user=f"system:serviceaccount:{namespace}:{account}",
        kubeconfig=kubeconfig.write(tmp / f"{account}.kubeconfig", doc),
        liveness_port=free_port(),
        metrics_port=free_port(),
    )


def start(
    running: cluster.Cluster, replica: Replica, namespace: str, *, launcher: tuple[str, ...] = ()
) -> None:
    cluster.start_operator(
        running,
        log=lambda _m: None,
        name=replica.name,
        liveness_port=replica.liveness_port,
        metrics_port=replica.metrics_port,
        kubeconfig_path=replica.kubeconfig,
        launcher=launcher,
        extra_args=[f"--leader-election-namespace={namespace}"],
    )


def record_of(running: cluster.Cluster, replica: Replica) -> processes.Record:
    return next(r for r in processes.read_records(running.layout.run) if r.name == replica.name)


@pytest.fixture
def running(local_cluster: cluster.Cluster) -> cluster.Cluster:
    kubectl = Binaries.for_checkout().path("kubectl")
    cluster.install_crds(kubectl, local_cluster.kubeconfig, repo_root() / "crds", lambda _m: None)
    return local_cluster


@pytest.fixture
def pair(
    running: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> Iterator[tuple[Replica, Replica]]:
    """Two identities under the generated ClusterRole; their processes stopped after."""
    role = f"specdeploy-operator-{namespace}"
    admin.create(operator_cluster_role(role))
    replicas = tuple(
        make_replica(admin, running, namespace, account, role, tmp_path) for account in ("a", "b")
    )
    try:
        yield replicas[0], replicas[1]
    finally:
        for replica in replicas:
            cluster.stop(running, replica.name)
        for kind, name in [("ClusterRole", role)] + [
            ("ClusterRoleBinding", f"{role}-{account}") for account in ("a", "b")
        ]:
            try:
                admin.delete(paths.path(kind, name=name))
            except ApiError as err:
                if err.status != 404:
                    raise


# --- what the cluster says ----------------------------------------------------------


def lease(admin: KubeApi, namespace: str) -> Obj:
    return admin.get_or_none(paths.path("Lease", namespace, LEASE)) or {}


def leader_pid(admin: KubeApi, namespace: str) -> int | None:
    """The pid in the Lease's holder (hostname_pid_suffix); None while nobody holds it."""
    holder = (lease(admin, namespace).get("spec") or {}).get("holderIdentity") or ""
    parts = holder.rsplit("_", 2)
    return int(parts[1]) if len(parts) == 3 else None


def wait_leader(admin: KubeApi, namespace: str, pid: int, timeout: float) -> float:
    """Seconds until the Lease names ``pid``."""
    started = time.monotonic()
    wait_for(
        lambda: leader_pid(admin, namespace) == pid,
        what=f"the Lease to name pid {pid}",
        timeout=timeout,
    )
    return time.monotonic() - started


def writes_by(running: cluster.Cluster, user: str, since: datetime) -> list[audit.Write]:
    """Every audited write of ``user`` since ``since`` (Lease renewals included), in every
    namespace. The replicas watch the whole cluster, so an earlier module's deployment whose
    namespace is still being deleted (namespace deletion does not wait) is theirs to
    reconcile too: a check about this test's deployment filters on its namespace."""
    writes = audit.read_writes(running.layout.audit_log)
    return [w for w in writes if w.user == user and w.at >= since]


def metric(replica: Replica, family: str) -> float:
    """The sum of a family's samples on the replica's own /metrics."""
    return family_total(f"127.0.0.1:{replica.metrics_port}", family)


def serving_deployments(admin: KubeApi, namespace: str) -> list[Obj]:
    return [
        d
        for d in children(admin, "Deployment", namespace)
        if d["metadata"]["name"].startswith(NAME)
    ]


def generations(admin: KubeApi, namespace: str) -> dict[str, int]:
    return {
        d["metadata"]["name"]: int(d["metadata"]["generation"])
        for d in serving_deployments(admin, namespace)
    }


def operator_events(admin: KubeApi, namespace: str) -> list[Obj]:
    return [
        e
        for e in admin.items(paths.path("Event", namespace))
        if e.get("reportingComponent") == "specdeploy-operator"
        or (e.get("source") or {}).get("component") == "specdeploy-operator"
    ]


def one_pool(name: str = NAME) -> Obj:
    body = example(name)
    body["spec"]["pools"] = [{"gpuType": "NVIDIA-L40S"}]
    return body


def now() -> datetime:
    return datetime.now(UTC)


# --- C16a: two replicas of one build ----------------------------------------------------


def test_of_two_replicas_only_the_leader_writes_and_the_standby_takes_over_after_a_kill(
    running: cluster.Cluster, admin: KubeApi, namespace: str, pair: tuple[Replica, Replica]
) -> None:
    a, b = pair
    since = now()
    start(running, a, namespace)
    wait_leader(admin, namespace, record_of(running, a).pid, timeout=30)
    start(running, b, namespace)
    create(admin, namespace, one_pool())
    wait_phase(admin, namespace, NAME, "Ready", timeout=READY_TIMEOUT)

    # The standby sent no write at all, not even to the Lease; the leader sent them all.
    assert writes_by(running, b.user, since) == []
    assert writes_by(running, a.user, since)
    assert (metric(a, "specdeploy_operator_leader"), metric(b, "specdeploy_operator_leader")) == (
        1,
        0,
    )
    assert metric(b, "specdeploy_operator_api_writes") == 0
    assert metric(b, "specdeploy_operator_reconciles") == 0
    # Every transition said once: no Event doubled, none counted twice.
    events = operator_events(admin, namespace)
    keys = [(e["involvedObject"].get("uid"), e["reason"], e.get("message")) for e in events]
    assert events and len(keys) == len(set(keys)), keys
    assert all(int(e.get("count") or 1) == 1 for e in events), [
        (e["reason"], e.get("count")) for e in events
    ]

    # Steady state with both running: the serving template holds still.
    settled = generations(admin, namespace)
    quiet_since = now()
    time.sleep(10)  # four of the standby's 2.2 s retries: time to grab it, were that wrong
    assert generations(admin, namespace) == settled
    deployment_writes = [
        w
        for w in writes_by(running, a.user, quiet_since) + writes_by(running, b.user, quiet_since)
        if w.resource == "deployments" and w.namespace == namespace
    ]
    assert deployment_writes == []

    # kill -9 the leader, and change the spec while nobody leads.
    os.killpg(record_of(running, a).pid, signal.SIGKILL)
    killed = now()
    new_image = "ghcr.io/specdeploy/specdeploy-runtime:0.1.1"
    admin.merge_patch(sdep_path(namespace, NAME), {"spec": {"vllm": {"image": new_image}}})
    took = wait_leader(
        admin,
        namespace,
        record_of(running, b).pid,
        timeout=LEASE_DURATION + scaled(TAKEOVER_MARGIN),
    )
    # It waited for the lease to expire (a standby never takes a lease that is renewed).
    assert took >= LEASE_DURATION - 2 * 2.2 - 1, took

    def rolled_out() -> bool:
        images = [
            d["spec"]["template"]["spec"]["containers"][0]["image"]
            for d in serving_deployments(admin, namespace)
        ]
        return bool(images) and all(i == new_image for i in images)

    wait_for(rolled_out, what="the new leader to roll out the new image", timeout=60)
    wait_phase(admin, namespace, NAME, "Ready", timeout=READY_TIMEOUT)
    assert writes_by(running, a.user, killed) == []
    assert writes_by(running, b.user, killed)
    assert metric(b, "specdeploy_operator_leader") == 1


# --- C16b/C17: a rolling upgrade with skewed builds --------------------------------------


def test_a_skewed_upgrade_hands_over_once_and_the_new_rendering_lands_once(
    running: cluster.Cluster, admin: KubeApi, namespace: str, pair: tuple[Replica, Replica]
) -> None:
    old, new = pair
    start(running, old, namespace)
    wait_leader(admin, namespace, record_of(running, old).pid, timeout=30)
    create(admin, namespace, one_pool())
    wait_phase(admin, namespace, NAME, "Ready", timeout=READY_TIMEOUT)
    before = generations(admin, namespace)
    assert before and not any(
        BUILD_ANNOTATION in (d["spec"]["template"]["metadata"].get("annotations") or {})
        for d in serving_deployments(admin, namespace)
    )

    # The surge pod: the new build starts beside the old one, and waits.
    overlap = now()
    start(running, new, namespace, launcher=(sys.executable, "-c", SKEWED_BUILD))
    time.sleep(30)
    assert generations(admin, namespace) == before
    assert writes_by(running, new.user, overlap) == []

    # The old pod is stopped (SIGTERM): it releases the Lease, the new one takes it at once.
    stopping = time.monotonic()
    assert cluster.stop(running, old.name)
    stopped = now()
    took = wait_leader(admin, namespace, record_of(running, new).pid, timeout=LEASE_DURATION)
    handover = time.monotonic() - stopping
    assert handover < LEASE_DURATION - 2 * 2.2 - 1, handover  # released, not expired
    assert "released Lease" in running.layout.log(old.name).read_text()

    def new_rendering() -> bool:
        return all(
            (d["spec"]["template"]["metadata"].get("annotations") or {}).get(BUILD_ANNOTATION)
            == "new"
            for d in serving_deployments(admin, namespace)
        )

    wait_for(new_rendering, what="the new build's pod template", timeout=60)
    wait_phase(admin, namespace, NAME, "Ready", timeout=READY_TIMEOUT)
    time.sleep(20)  # long enough for a flip back, were anyone left to flip it

    assert generations(admin, namespace) == {k: v + 1 for k, v in before.items()}
    assert new_rendering()
    assert writes_by(running, old.user, stopped) == []
    deployment_writes = [
        w
        for w in writes_by(running, new.user, overlap)
        if w.resource == "deployments" and w.namespace == namespace
    ]
    assert len(deployment_writes) == len(before), [w.what for w in deployment_writes]
    assert status(admin, namespace, NAME)["phase"] == "Ready"
    print(
        "\nleader handover (s):",
        json.dumps({"sigterm_to_new_leader": round(handover, 1), "lease_wait": round(took, 1)}),
    )
