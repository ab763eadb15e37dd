"""The values matrix, rendered by helm, dry-run on the local API server (``--dry-run=server``).

The API server runs its admission and the schemas of every CRD involved, which offline
validation cannot: our own CRDs (crds/) and, generated from their Go API modules, the
Prometheus Operator's and KEDA's (``e2e/thirdparty/crds``). The session's cluster is shared;
a dry run writes nothing, and the namespaces it needs are made per test.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster import cluster
from e2e.localcluster.binaries import Binaries, repo_root
from e2e.localcluster.kubeapi import KubeApi
from e2e.tests.chart.cases import CASES
from e2e.tests.chart.chart_render import (
    Case,
    Doc,
    chart_with_files,
    is_hook,
    load_all,
    of_kind,
    render,
    run_helm,
)
from specdeploy.chart import crd_apply
from specdeploy.cli import main
from specdeploy.runtime.kube import paths

THIRD_PARTY = repo_root() / "e2e" / "thirdparty" / "crds"


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [str(Binaries.for_checkout().path("kubectl")), f"--kubeconfig={kubeconfig}", *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)


def apply_crds(kubeconfig: Path, directory: Path) -> None:
    """Server-side (the Prometheus Operator's CRDs exceed client-side apply's annotation)."""
    files = sorted(directory.glob("*.yaml"))
    assert files, f"no CRDs in {directory}: run e2e/thirdparty/crds.sh"
    for action in (
        ["apply", "--server-side", "--force-conflicts", "--field-manager=specdeploy-tests"],
        ["wait", "--for=condition=Established", "--timeout=60s"],
    ):
        done = kubectl(kubeconfig, *action, "-f", str(directory))
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def with_crds(local_cluster: cluster.Cluster) -> cluster.Cluster:
    apply_crds(local_cluster.kubeconfig, repo_root() / "crds")
    apply_crds(local_cluster.kubeconfig, THIRD_PARTY)
    return local_cluster


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chart_with_files(tmp_path_factory.mktemp("chart"))


@pytest.fixture
def watched(admin: KubeApi, namespace: str) -> Iterator[list[str]]:
    """Two more namespaces for the namespaced mode's Roles (names derived from the test's)."""
    names = [f"{namespace[:55]}-w{i}" for i in range(2)]
    for name in names:
        admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield names
    for name in names:
        admin.delete(paths.path("Namespace", name=name))


def _localised(case: Case, watched: list[str]) -> Case:
    """The case with its watched namespaces replaced by ones that exist."""
    values: dict[str, Any] = dict(case.values)
    if "watchNamespaces" in values:
        values["watchNamespaces"] = watched[: len(values["watchNamespaces"])]
    return Case(values, case.api_versions)


def dry_run(kubeconfig: Path, docs: list[Doc]) -> subprocess.CompletedProcess[str]:
    return kubectl(
        kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs)
    )


@pytest.mark.parametrize("case", CASES)
def test_the_rendered_chart_passes_a_server_side_dry_run(
    case: str,
    with_crds: cluster.Cluster,
    chart: Path,
    namespace: str,
    watched: list[str],
    tmp_path: Path,
) -> None:
    docs = render(chart, _localised(CASES[case], watched), namespace=namespace, tmp=tmp_path)
    done = dry_run(with_crds.kubeconfig, docs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(docs), done.stdout


def test_the_dry_run_enforces_the_prometheus_operators_schema(
    with_crds: cluster.Cluster, chart: Path, namespace: str, tmp_path: Path
) -> None:
    docs = render(chart, CASES["monitoring-on"], namespace=namespace, tmp=tmp_path)
    (monitor,) = of_kind(docs, "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "every now and then"
    done = dry_run(with_crds.kubeconfig, [monitor])
    assert done.returncode != 0
    assert "interval" in done.stderr


def test_the_hooks_identity_can_apply_the_crds_and_nothing_else(
    with_crds: cluster.Cluster, admin: KubeApi, chart: Path, namespace: str, tmp_path: Path
) -> None:
    """The hook's ServiceAccount, ClusterRole and binding, made for real; then its token
    applies the chart's CRDs (what the Job runs) and is refused a third-party CRD."""
    docs = render(chart, Case(), namespace=namespace, tmp=tmp_path)
    identity = [d for d in docs if is_hook(d) and d["kind"] != "Job" and d["kind"] != "ConfigMap"]
    for doc in identity:
        admin.create(doc)
    try:
        account = next(d for d in identity if d["kind"] == "ServiceAccount")["metadata"]["name"]
        hook = admin.with_token(admin.request_token(namespace, account))
        crds = crd_apply.load(repo_root() / "charts" / "specdeploy" / "crds")
        assert len(crd_apply.apply(hook, crd_apply.requests_for(crds))) == 2
        for crd in crds:
            current = admin.get(
                paths.path("CustomResourceDefinition", name=crd["metadata"]["name"])
            )
            managers = {m["manager"] for m in current["metadata"]["managedFields"]}
            assert crd_apply.FIELD_MANAGER in managers
        foreign = yaml.safe_load(next(THIRD_PARTY.glob("*servicemonitors.yaml")).read_text())
        with pytest.raises(Exception, match="403"):
            crd_apply.apply(hook, crd_apply.requests_for([foreign]))
    finally:
        for doc in reversed(identity):
            kind, meta = doc["kind"], doc["metadata"]
            admin.delete(paths.path(kind, namespace=meta.get("namespace"), name=meta["name"]))


def test_helm_install_dry_run_on_the_server_finds_the_prometheus_operator_itself(
    with_crds: cluster.Cluster, chart: Path, namespace: str
) -> None:
    """No --api-versions: Helm reads the served APIs from the server (``.Capabilities``), so
    the monitoring objects appear because the CRDs are installed, and the API server checks
    every object of the release."""
    done = run_helm(
        "install", "sd", str(chart), "-n", namespace, "--dry-run=server", "-o", "json",
        f"--kubeconfig={with_crds.kubeconfig}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    release = json.loads(done.stdout)
    kinds = {d["kind"] for d in load_all(release["manifest"])}
    assert {"Deployment", "ServiceMonitor", "PodMonitor", "PrometheusRule"} <= kinds
    assert "No Prometheus Operator was found" not in release["info"]["notes"]
    assert {h["kind"] for h in release["hooks"]} >= {"Job", "ConfigMap"}


def test_the_hook_command_applies_a_changed_crd_schema_and_the_charts_again(
    with_crds: cluster.Cluster, admin: KubeApi, tmp_path: Path
) -> None:
    """What a `helm upgrade` with a changed CRD relies on: the Job's command, connected by
    a kubeconfig, replaces the served schema (here: a description) and restores it."""
    source = repo_root() / "charts" / "specdeploy" / "crds"
    name = "speculationprofiles.specdeploy.io"
    path = paths.path("CustomResourceDefinition", name=name)

    def served_description() -> str | None:
        version = admin.get(path)["spec"]["versions"][0]
        description: str | None = version["schema"]["openAPIV3Schema"].get("description")
        return description

    original = served_description()
    changed = tmp_path / "crds"
    changed.mkdir()
    for crd in source.glob("*.yaml"):
        body = yaml.safe_load(crd.read_text())
        body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "upgraded"
        (changed / crd.name).write_text(yaml.safe_dump(body))
    argv = ["operator", "crds", "--apply", f"--kubeconfig={with_crds.kubeconfig}", "--from"]
    try:
        assert main([*argv, str(changed)]) == 0
        assert served_description() == "upgraded"
    finally:
        assert main([*argv, str(source)]) == 0
    assert served_description() == original
