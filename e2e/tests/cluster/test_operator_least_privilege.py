"""Least privilege, read from the API server's audit log (issue 15, review M9 and R1).

The operator runs as its own ServiceAccount bound to the ClusterRole that
``specdeploy operator rbac`` prints (``e2e/localcluster/identity.py``), never
as the cluster's admin, in every test of the suite. This module walks it
through what it does to a deployment (profile, serve, revert a hand edit,
drop a pool, delete) and reads the audit log for that user: no request was
refused by RBAC, and the pool's removal used every verb the ClusterRole
grants on the kinds it touched. Over a whole run of the cluster suite,
``e2e/conftest.py`` checks that no request anywhere was refused and that
every grant was used (``identity.GRANTED_WITHOUT_A_REQUEST`` aside).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from e2e.localcluster import audit, cluster, identity
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from e2e.tests.cluster.test_operator_lifecycle import (
    GPU_TYPES,
    children,
    ready_example,
    sdep_path,
)
from specdeploy.operator.builders.rbac import CHILD_VERBS, operator_cluster_role
from specdeploy.runtime.kube import paths


@dataclass(frozen=True)
class Operator:
    cluster: cluster.Cluster
    started: datetime
    """Before this module's operator process started: its watches began after this."""


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[Operator]:
    started = datetime.now(UTC)
    with cluster.operator_running(local_cluster):
        yield Operator(local_cluster, started)


def test_the_operator_is_refused_nothing_and_a_pools_removal_uses_each_verb_it_holds(
    operator: Operator, admin: KubeApi, namespace: str
) -> None:
    """Its children are read from one watch per kind across the cluster (issue 18: a list
    and a watch by label selector, no namespace), and written in the namespace."""
    ready_example(admin, namespace)
    # a hand edit of a table ConfigMap: the operator puts its own back
    (table, *_) = children(admin, "ConfigMap", namespace)
    table_path = paths.path("ConfigMap", namespace, table["metadata"]["name"])
    admin.merge_patch(table_path, {"data": {"table.json": "{}"}})
    wait_for(
        lambda: admin.get(table_path)["data"].get("table.json") != "{}",
        what="the hand edit reverted",
        timeout=60,
    )
    # the optional NetworkPolicy, one per pool, fenced to the namespace's own pods
    sdep = sdep_path(namespace, "llama-8b-chat")
    admin.merge_patch(sdep, {"spec": {"networkPolicy": {"enabled": True}}})
    fences = wait_for(
        lambda: children(admin, "NetworkPolicy", namespace) or None,
        what="the pools' NetworkPolicies",
        timeout=60,
    )
    assert fences[0]["spec"]["ingress"][0]["from"] == [{"podSelector": {}}]
    # one pool fewer: its Deployment, table, budget and policy are deleted by the operator
    admin.merge_patch(sdep, {"spec": {"pools": [{"gpuType": GPU_TYPES[0]}]}})
    for kind in ("Deployment", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy"):

        def one_left(kind: str = kind) -> bool | None:
            return len(children(admin, kind, namespace)) == 1 or None

        wait_for(one_left, what=f"the removed pools' {kind}s deleted", timeout=60)

    since_start = [
        r
        for r in audit.requests_of(operator.cluster.layout.audit_log, identity.USER)
        if r.at >= operator.started
    ]
    requests = [r for r in since_start if r.namespace == namespace]
    assert requests, "the audit log records the operator's identity"
    assert audit.refused(since_start) == []
    granted = audit.grants(operator_cluster_role())
    assert {(r.group, r.resource, r.verb) for r in since_start} <= granted
    used = {(r.group, r.resource, r.verb) for r in requests}
    watched = {
        (r.group, r.resource, r.verb)
        for r in since_start
        if not r.namespace and r.verb in ("list", "watch")
    }
    for group, resource in (("apps", "deployments"), ("", "configmaps")):
        assert {(group, resource, v) for v in ("list", "watch")} <= watched
        assert {(group, resource, v) for v in CHILD_VERBS if v not in ("list", "watch")} <= used
    assert ("policy", "poddisruptionbudgets", "delete") in used
    assert ("networking.k8s.io", "networkpolicies", "delete") in used


def test_a_hugging_face_token_never_leaves_its_secret(
    operator: Operator, admin: KubeApi, namespace: str
) -> None:
    """Review R7: the token reaches the pods as a secretKeyRef; the operator, which may not
    read Secrets at all, copies it nowhere: not into a child, the status, an Event or its log."""
    import base64
    import json
    import uuid

    canary = f"hf_canary_{uuid.uuid4().hex}"
    admin.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf", "namespace": namespace},
            "data": {"token": base64.b64encode(canary.encode()).decode()},
        }
    )
    ready_example(admin, namespace, model={"tokenSecretRef": {"name": "hf"}})

    kinds = ("Deployment", "Job", "ConfigMap", "Service", "PodDisruptionBudget", "Event")
    everything = [o for kind in kinds for o in admin.items(paths.path(kind, namespace))]
    everything.append(admin.get(sdep_path(namespace, "llama-8b-chat")))
    assert canary not in json.dumps(everything)
    assert canary not in operator.cluster.layout.log("operator").read_text(errors="replace")
    (serving, *_) = children(admin, "Deployment", namespace)
    env = serving["spec"]["template"]["spec"]["containers"][0]["env"]
    (hf,) = [e for e in env if e["name"] == "HF_TOKEN"]
    assert hf["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
