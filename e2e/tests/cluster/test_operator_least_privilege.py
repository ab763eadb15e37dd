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


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster


def test_the_operator_is_refused_nothing_and_a_pools_removal_uses_each_verb_it_holds(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
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
    # one pool fewer: its Deployment, table and disruption budget are deleted by the operator
    admin.merge_patch(
        sdep_path(namespace, "llama-8b-chat"), {"spec": {"pools": [{"gpuType": GPU_TYPES[0]}]}}
    )
    for kind in ("Deployment", "ConfigMap", "PodDisruptionBudget"):

        def one_left(kind: str = kind) -> bool | None:
            return len(children(admin, kind, namespace)) == 1 or None

        wait_for(one_left, what=f"the removed pools' {kind}s deleted", timeout=60)

    requests = [
        r
        for r in audit.requests_of(operator.layout.audit_log, identity.USER)
        if r.namespace == namespace
    ]
    assert requests, "the audit log records the operator's identity"
    assert audit.refused(requests) == []
    granted = audit.grants(operator_cluster_role())
    assert {(r.group, r.resource, r.verb) for r in requests} <= granted
    used = {(r.group, r.resource, r.verb) for r in requests}
    for group, resource in (("apps", "deployments"), ("", "configmaps")):
        assert {(group, resource, v) for v in CHILD_VERBS if v != "watch"} <= used
    assert ("policy", "poddisruptionbudgets", "delete") in used
