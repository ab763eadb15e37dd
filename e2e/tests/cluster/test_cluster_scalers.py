"""The pools' scalers of modes hpa and keda pass the API server's own checks (server dry-run).

The HPA is ``autoscaling/v2``, built in; the ScaledObject is checked against KEDA's CRD
(``e2e/thirdparty/crds``, generated from KEDA v2.21.0's Go API), installed in the session's
cluster: KEDA itself does not run here (too heavy for CI, ``reviews/testbed.md``), so what
is proven is that KEDA's API accepts what the operator writes, not that KEDA scales on it.
The manifests come from the operator's own builders.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster import cluster
from e2e.localcluster.binaries import repo_root
from e2e.tests.chart.test_chart_dry_run import THIRD_PARTY, apply_crds, kubectl
from specdeploy.operator.api import AutoscalingSpec
from specdeploy.operator.builders.common import Parent
from specdeploy.operator.builders.scaler import pool_hpa, pool_scaled_object


@pytest.fixture(scope="module")
def with_crds(local_cluster: cluster.Cluster) -> cluster.Cluster:
    apply_crds(local_cluster.kubeconfig, repo_root() / "crds")
    apply_crds(local_cluster.kubeconfig, THIRD_PARTY)
    return local_cluster


def scaler(mode: str, kind: str, namespace: str) -> dict[str, Any]:
    """The pool scaler the operator's builders make for the example spec in ``mode``."""
    doc = yaml.safe_load((repo_root() / "examples" / "specdeploy.yaml").read_text())
    doc["metadata"].update(namespace=namespace, uid="0000-dry-run")
    spec = AutoscalingSpec(mode=mode, tpot_target_ms=20, scale_down_window_seconds=120)
    parent = Parent.of(doc)
    shape = {"name": "llama-h100", "gpu_type": "NVIDIA-H100-80GB-HBM3"}
    if kind == "HorizontalPodAutoscaler":
        manifest = pool_hpa(parent, spec, min_replicas=1, max_replicas=4, **shape)
    else:
        url = "http://prometheus.monitoring.svc:9090"
        manifest = pool_scaled_object(
            parent, spec, min_replicas=1, max_replicas=4, prometheus_url=url, **shape
        )
    manifest["metadata"].pop("ownerReferences", None)  # the parent does not exist here
    return manifest


def dry_run(kubeconfig: Path, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl(
        kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(manifest)
    )


@pytest.mark.parametrize(
    ("mode", "kind"), [("hpa", "HorizontalPodAutoscaler"), ("keda", "ScaledObject")]
)
def test_the_operators_scaler_passes_a_server_side_dry_run(
    mode: str, kind: str, with_crds: cluster.Cluster, namespace: str
) -> None:
    done = dry_run(with_crds.kubeconfig, scaler(mode, kind, namespace))

    assert done.returncode == 0, done.stderr
    assert "(server dry run)" in done.stdout


@pytest.mark.parametrize(
    ("mode", "kind", "path", "bad"),
    [
        ("hpa", "HorizontalPodAutoscaler", ("spec", "maxReplicas"), 0),
        ("keda", "ScaledObject", ("spec", "triggers"), "prometheus"),
    ],
)
def test_the_dry_run_refuses_a_broken_scaler(
    mode: str,
    kind: str,
    path: tuple[str, str],
    bad: object,
    with_crds: cluster.Cluster,
    namespace: str,
) -> None:
    """The check can fail: the same manifest with one field broken is refused."""
    manifest = scaler(mode, kind, namespace)
    manifest[path[0]][path[1]] = bad

    done = dry_run(with_crds.kubeconfig, manifest)

    assert done.returncode != 0, done.stdout
