"""The namespaced mode, in a namespace that enforces Pod Security ``restricted`` (issue 15).

The operator runs with ``--namespace NS`` as an account of its own whose rights
are a Role in NS plus a ClusterRole of cluster-scoped reads (nodes, CRDs):
``specdeploy operator rbac --namespace NS``. The namespace enforces the
``restricted`` Pod Security level, so the API server admits the profiling
and serving pods only if they are non-root, drop every capability, run
seccomp RuntimeDefault and forbid privilege escalation (review M8). The
example still profiles and serves, and RBAC refused the operator nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.localcluster import audit, cluster, identity
from e2e.localcluster.binaries import Binaries, repo_root
from e2e.localcluster.kubeapi import KubeApi
from e2e.tests.cluster.test_operator_lifecycle import children, ready_example
from specdeploy.runtime.kube import paths

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@pytest.fixture
def restricted(admin: KubeApi, namespace: str) -> str:
    admin.merge_patch(paths.path("Namespace", name=namespace), {"metadata": {"labels": RESTRICTED}})
    return namespace


@pytest.fixture
def namespaced_operator(local_cluster: cluster.Cluster, restricted: str) -> Iterator[str]:
    kubectl = Binaries.for_checkout().path("kubectl")
    cluster.install_crds(kubectl, local_cluster.kubeconfig, repo_root() / "crds", lambda _m: None)
    cluster.start_operator(local_cluster, log=lambda _m: None, watched=restricted)
    try:
        yield restricted
    finally:
        cluster.stop(local_cluster, "operator")


def test_the_namespaced_operator_serves_a_restricted_namespace_under_its_role(
    local_cluster: cluster.Cluster, admin: KubeApi, namespaced_operator: str
) -> None:
    namespace = namespaced_operator
    ready = ready_example(admin, namespace)

    assert {p["state"] for p in ready["pools"]} == {"Ready"}
    pods = children(admin, "Pod", namespace)
    assert pods, "the serving pods were admitted under Pod Security restricted"
    requests = list(audit.requests_of(local_cluster.layout.audit_log, identity.NAMESPACED_USER))
    assert requests
    assert audit.refused(requests) == []
    assert {r.namespace for r in requests if r.namespace} == {namespace}
