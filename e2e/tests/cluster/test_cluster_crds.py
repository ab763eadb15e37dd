"""The project's CRDs install on a real API server (which runs their CEL rules)."""

from __future__ import annotations

from e2e.localcluster import cluster
from e2e.localcluster.binaries import Binaries, repo_root


def test_the_projects_crds_install_and_become_established(
    local_cluster: cluster.Cluster,
) -> None:
    kubectl = Binaries.for_checkout().path("kubectl")
    messages: list[str] = []

    cluster.install_crds(kubectl, local_cluster.kubeconfig, repo_root() / "crds", messages.append)

    assert messages and "installed" in messages[0]
