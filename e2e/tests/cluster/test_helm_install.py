"""The chart on the local cluster: ``helm install``, ``upgrade`` and ``uninstall`` (issue 16).

A cluster of its own with no operator started by the harness: the operator
that reconciles here is the one the chart installs, running in its pod (the
kubelet stand-in runs the container's command as that pod's ServiceAccount),
so what it may do is what the chart's ClusterRole grants. The API server's
audit log says who wrote what: every write of the operator's client in the
user's namespace is the chart's ServiceAccount's, and the CRD change of an
upgrade is the hook's, never the admin's (Helm's own client) - Helm never
upgrades ``crds/`` itself.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import clusters_root
from e2e.demo.helm import NAMESPACE, RELEASE, Helm, chart_dir
from e2e.localcluster import audit, cluster, emulation, processes, prometheus
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.operator.builders.rbac import operator_cluster_role
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
FLEET = "h100=1"
ACCOUNT = RELEASE
"""The chart's ServiceAccount: its full name, which is the release name here."""
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
HOOK_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-crd-upgrade"
"""The CRD-upgrade hook Job's ServiceAccount (it exists while the hook runs)."""
EXAMPLE = "examples/specdeploy.yaml"
SDEP_CRD = "speculativedeployments.specdeploy.io"
CRD_FILE = "crds/specdeploy.io_speculativedeployments.yaml"
ADDED_FIELD = "upgradeProbe"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def bare() -> Iterator[cluster.Cluster]:
    """A cluster of this module's own: no CRDs, no operator (the chart brings both)."""
    workdir = clusters_root() / f"helm-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    # e2e/conftest.py's reaper stops it if this session dies without tearing down.
    ticks = processes.start_ticks(os.getpid())
    owner = processes.Record("pytest", os.getpid(), ticks if ticks is not None else -1)
    (workdir / "owner.json").write_text(json.dumps(owner.__dict__))
    running = cluster.up(workdir, fleet_spec=FLEET, crds=None, operator=False, log=lambda _m: None)
    try:
        yield running
    finally:
        cluster.down(workdir, log=lambda _m: None)
        shutil.rmtree(workdir, ignore_errors=True)
        print("\nhelm e2e timings (s):", json.dumps(TIMINGS))


def timed(label: str, started: float) -> None:
    TIMINGS[label] = round(time.monotonic() - started, 1)


def operator_pods(api: KubeApi) -> list[Obj]:
    selector = "app.kubernetes.io/component=operator,app.kubernetes.io/instance=" + RELEASE
    return api.items(paths.path("Pod", NAMESPACE), labelSelector=selector)


def running_operator(api: KubeApi) -> Obj | None:
    """The operator pod once the stand-in runs it (its pid annotation is there)."""
    for pod in operator_pods(api):
        if emulation.LOCAL_PID in (pod["metadata"].get("annotations") or {}):
            return pod
    return None


def changed_chart(tmp_path: Path) -> Path:
    """A copy of the chart whose SpeculativeDeployment CRD has one more spec field."""
    copy = tmp_path / "chart"
    shutil.copytree(chart_dir(), copy)
    crd_file = copy / CRD_FILE
    crd = yaml.safe_load(crd_file.read_text())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"][ADDED_FIELD] = {"type": "string", "description": "upgrade test"}
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return copy


def spec_fields(api: KubeApi) -> set[str]:
    crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{SDEP_CRD}")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


def operator_writes(log: Path, namespace: str) -> list[audit.Write]:
    """Writes in ``namespace`` by the operator's client (its user agent), whoever it ran as;
    the profiler's writes of its SpeculationProfile (the same client, its Job's own
    ServiceAccount) aside."""
    return [
        w
        for w in audit.read_writes(log)
        if w.namespace == namespace
        and w.user_agent == audit.OPERATOR_USER_AGENT
        and w.resource != "speculationprofiles"
    ]


def test_helm_installs_an_operator_that_serves_the_example_as_the_charts_identity_then_upgrades_and_uninstalls(  # noqa: E501
    bare: cluster.Cluster, tmp_path: Path
) -> None:
    admin = bare.api()
    helm = Helm(bare.kubeconfig, tmp_path / "helm-home")
    values = {"operator.prometheusURL": bare.prometheus_url}
    started = time.monotonic()
    notes = helm.install(chart_dir(), values)
    # NOTES tells the user what an uninstall leaves, which the end of this test checks.
    assert f"helm uninstall {RELEASE}" in notes and "leaves the CRDs" in " ".join(notes.split())
    pod = wait_for(lambda: running_operator(admin), what="the operator pod running", timeout=60)
    timed("helm install to the operator running", started)
    assert pod["spec"]["serviceAccountName"] == ACCOUNT
    binding = admin.get(paths.path("ClusterRoleBinding", name=RELEASE))
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
    ]
    role = admin.get(paths.path("ClusterRole", name=binding["roleRef"]["name"]))
    assert audit.grants(role) == audit.grants(operator_cluster_role())

    # Its /metrics scraped as job specdeploy-operator, from the pod the stand-in runs.
    def operator_up() -> list[Obj] | None:
        found = prometheus.instant_query(bare.prometheus_url, 'up{job="specdeploy-operator"} == 1')
        return found or None

    (up,) = wait_for(operator_up, what="the operator's /metrics scraped", timeout=60)
    assert up["metric"]["pod"] == pod["metadata"]["name"]

    # The example, unchanged, reconciled to Ready by that operator.
    namespace = "helm-e2e"
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    example = yaml.safe_load((chart_dir().parents[1] / EXAMPLE).read_text())
    sdep = paths.path("SpeculativeDeployment", namespace, example["metadata"]["name"])
    started = time.monotonic()
    wait_for(
        lambda: _post(admin, namespace, example), what="the CRD to accept the example", timeout=30
    )

    def ready() -> Obj | None:
        body = admin.get(sdep)
        return body if (body.get("status") or {}).get("phase") == "Ready" else None

    wait_for(ready, what="the example Ready", timeout=180)
    timed("example Ready", started)
    writes = operator_writes(bare.layout.audit_log, namespace)
    assert {w.user for w in writes} == {USER}, "the operator wrote as someone else"
    assert {"create jobs", "patch speculativedeployments/status"} <= {w.what for w in writes}
    requests = list(audit.requests_of(bare.layout.audit_log, USER))
    assert audit.refused(requests) == [], "the chart's ClusterRole lacks a grant"
    watched = {(r.group, r.resource, r.verb) for r in requests}
    assert ("specdeploy.io", "speculativedeployments", "watch") in watched

    # An upgrade whose CRD adds a field: the hook applies it (Helm skips crds/ on upgrade).
    assert ADDED_FIELD not in spec_fields(admin)
    upgraded_at = time.monotonic()
    helm.install(changed_chart(tmp_path), values, upgrade=True)
    assert ADDED_FIELD in spec_fields(admin)
    timed("helm upgrade with a changed CRD", upgraded_at)
    crd_writes = [w for w in audit.read_writes(bare.layout.audit_log) if w.name == SDEP_CRD]
    assert (crd_writes[-1].verb, crd_writes[-1].user) == ("patch", HOOK_USER), crd_writes[-1]
    hook_requests = list(audit.requests_of(bare.layout.audit_log, HOOK_USER))
    assert hook_requests and audit.refused(hook_requests) == []

    # Uninstall: the operator goes (its process too), the CRDs and the user's resource stay.
    current = running_operator(admin)
    assert current is not None, "the operator pod is still running before the uninstall"
    pid = int(current["metadata"]["annotations"][emulation.LOCAL_PID])
    started = time.monotonic()
    helm.uninstall()
    wait_for(lambda: not operator_pods(admin), what="the operator pods gone", timeout=60)
    wait_for(lambda: not _alive(pid), what="the operator process stopped", timeout=60)
    timed("helm uninstall to the operator stopped", started)
    assert admin.get_or_none(paths.path("Deployment", NAMESPACE, RELEASE)) is None
    assert admin.get_or_none(paths.path("ClusterRoleBinding", name=RELEASE)) is None
    assert ADDED_FIELD in spec_fields(admin), "the CRD stays, as upgraded"
    assert admin.get(sdep)["metadata"]["name"] == example["metadata"]["name"]


def _post(admin: KubeApi, namespace: str, body: Obj) -> bool:
    """Create the resource; False while its CRD is not served yet (404)."""
    try:
        admin.post(paths.path("SpeculativeDeployment", namespace), body)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
