"""``helm lint`` and ``helm template`` over a matrix of values, checked offline.

Each rendering is validated by kubernetes-validate (``--strict``, Kubernetes 1.35.0:
unknown fields fail) and read back against the sources the chart must agree with: the
operator's real argument parser, ``operator.builders.rbac``, the CRD files, the label
contract of ``e2e/localcluster/prometheus.py``. The same matrix is dry-run on the API
server in ``test_chart_dry_run``.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from e2e.localcluster import prometheus
from e2e.tests.chart.cases import CASES, CUSTOM, NAMESPACE
from e2e.tests.chart.chart_render import (
    CHART,
    RULES,
    Doc,
    chart_with_files,
    installed,
    is_hook,
    of_kind,
    one,
    operator_container,
    render,
    run_helm,
)
from specdeploy.cli import build_parser
from specdeploy.operator.builders.rbac import operator_cluster_role, operator_namespaced_roles

BUILT_IN_GROUPS = ("v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1")


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chart_with_files(tmp_path_factory.mktemp("chart"))


@pytest.fixture(scope="module")
def rendered(chart: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    """Every case rendered once for the module (helm takes ~0.1 s a rendering)."""
    return {
        name: render(chart, case, namespace=NAMESPACE, tmp=tmp_path_factory.mktemp(name))
        for name, case in CASES.items()
    }


@pytest.mark.parametrize("with_files", [False, True], ids=["as-committed", "with-files"])
def test_helm_lint_strict_passes(with_files: bool, chart: Path) -> None:
    done = run_helm("lint", "--strict", str(chart if with_files else CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("case", CASES)
def test_every_built_in_object_validates_strictly_against_kubernetes_1_35(
    case: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[case]
    built_in = [d for d in docs if d["apiVersion"] in BUILT_IN_GROUPS]
    assert {d["apiVersion"] for d in docs} <= {*BUILT_IN_GROUPS, "monitoring.coreos.com/v1"}
    assert len(built_in) >= 9
    for doc in built_in:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)


def test_strict_validation_can_fail_on_an_unknown_field(rendered: dict[str, list[Doc]]) -> None:
    deployment = one(rendered["defaults"], "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.35.0", strict=True)


def _parsed_args(docs: list[Doc]) -> Any:
    container = operator_container(docs)
    argv = [*container["command"][1:], *container["args"]]
    assert container["command"][0] == "specdeploy"
    return build_parser(argv).parse_args(argv)


@pytest.mark.parametrize("case", CASES)
def test_the_operator_runs_with_flags_its_parser_accepts_and_the_values_meant(
    case: str, rendered: dict[str, list[Doc]]
) -> None:
    args = _parsed_args(rendered[case])
    values = CASES[case].values
    namespaces = list(values.get("watchNamespaces", []))
    assert args.namespace == namespaces
    election = values.get("leaderElection", {})
    assert args.leader_elect is election.get("enabled", True)
    if args.leader_elect:
        assert args.leader_election_id == election.get("id", "specdeploy-operator")
        assert args.leader_election_namespace == (namespaces[0] if namespaces else NAMESPACE)
        assert args.leader_elect_lease_duration == election.get("leaseDuration", 15)
    assert args.metrics_port == 9401
    assert args.liveness == "http://0.0.0.0:8080/healthz"


@pytest.mark.parametrize("case", CASES)
def test_the_pod_is_hardened_and_probed_on_the_operators_health_endpoint(
    case: str, rendered: dict[str, list[Doc]]
) -> None:
    pod = one(rendered[case], "Deployment")["spec"]["template"]["spec"]
    container = operator_container(rendered[case])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    health = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert health == {"metrics": 9401, "health": 8080}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    account = one(installed(rendered[case]), "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_custom_values_reach_the_pod(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["custom-image-and-resources"]
    deployment = one(docs, "Deployment")
    container = operator_container(docs)
    assert container["image"] == "registry.example/specdeploy:9.9.9"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == CUSTOM["resources"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == CUSTOM["nodeSelector"]
    assert pod["spec"]["tolerations"] == CUSTOM["tolerations"]
    assert pod["metadata"]["annotations"] == CUSTOM["podAnnotations"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SPECDEPLOY_PROMETHEUS_URL"] == "http://prometheus.monitoring:9090"
    hook = next(j for j in of_kind(docs, "Job"))
    assert hook["spec"]["template"]["spec"]["containers"][0]["image"] == container["image"]


def _rules(doc: Doc) -> Any:
    return doc["rules"]


@pytest.mark.parametrize("case", ["defaults", "custom-image-and-resources", "leader-election-off"])
def test_cluster_wide_rbac_is_the_builders_cluster_role(
    case: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = installed(rendered[case])
    lease = CASES[case].values.get("leaderElection", {}).get("id", "specdeploy-operator")
    operator_roles = of_kind(docs, "ClusterRole")
    assert [_rules(r) for r in operator_roles] == [operator_cluster_role(lease=lease)["rules"]]
    assert of_kind(docs, "Role") == []
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == operator_roles[0]["metadata"]["name"]
    account = one(docs, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    ]


def test_the_namespaced_mode_grants_a_builders_role_per_namespace_and_cluster_reads(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = installed(rendered["namespaced"])
    role, reads = operator_namespaced_roles("team-a")
    roles = of_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert all(_rules(r) == role["rules"] for r in roles)
    bindings = of_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    operator_roles = of_kind(docs, "ClusterRole")
    assert [_rules(r) for r in operator_roles] == [reads["rules"]]


@pytest.mark.parametrize("case", CASES)
def test_monitoring_objects_exist_only_where_the_apis_are_served_and_enabled(
    case: str, rendered: dict[str, list[Doc]]
) -> None:
    served = bool(CASES[case].api_versions)
    enabled = "monitoring" not in CASES[case].values
    kinds = {d["kind"] for d in rendered[case] if d["apiVersion"] == "monitoring.coreos.com/v1"}
    expected = {"ServiceMonitor", "PodMonitor", "PrometheusRule"} if served and enabled else set()
    assert kinds == expected


def test_the_service_monitor_scrapes_the_operators_metrics_port_as_its_job(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["monitoring-on"]
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert {"targetLabel": "job", "replacement": "specdeploy-operator"} in endpoint["relabelings"]


def test_the_pod_monitor_gives_the_label_contract_of_the_local_prometheus(
    rendered: dict[str, list[Doc]],
) -> None:
    monitor = one(rendered["monitoring-on"], "PodMonitor")
    jobs = {}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        relabel = endpoint["relabelings"]
        job = next(r["replacement"] for r in relabel if r["targetLabel"] == "job")
        sources = {r["targetLabel"]: r.get("sourceLabels") for r in relabel if "sourceLabels" in r}
        assert sources == {
            target: [f"__meta_kubernetes_pod_label_{re.sub('[^a-zA-Z0-9_]', '_', label)}"]
            for label, target in prometheus.POD_LABELS.items()
        }
        jobs[endpoint["port"]] = job
    # builders/deployment.py names vLLM's port "http" and the add-on's "metrics".
    assert jobs == {"http": "vllm", "metrics": "specdeploy-addon"}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["selector"]["matchLabels"] == {"specdeploy.io/component": "serving"}
    namespaced = one(rendered["namespaced-monitoring-on"], "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_the_prometheus_rule_embeds_the_rules_file(
    chart: Path, rendered: dict[str, list[Doc]]
) -> None:
    rule = one(rendered["monitoring-on"], "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load((chart / RULES).read_text())["groups"]


def test_one_dashboard_config_map_per_json_file_labelled_for_grafanas_sidecar(
    chart: Path, rendered: dict[str, list[Doc]]
) -> None:
    boards = sorted(p.name for p in (chart / "dashboards").glob("*.json"))
    maps = [
        m
        for m in of_kind(rendered["defaults"], "ConfigMap")
        if "dashboard" in m["metadata"]["name"]
    ]
    assert sorted(k for m in maps for k in m["data"]) == boards
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, body),) = config_map["data"].items()
        assert body == (chart / "dashboards" / name).read_text()


def test_the_crd_upgrade_hook_applies_the_charts_crds_with_patch_on_them_alone(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["defaults"]
    crds = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    names = sorted(yaml.safe_load(text)["metadata"]["name"] for text in crds.values())
    hooks = [d for d in docs if is_hook(d)]
    assert sorted(d["kind"] for d in hooks) == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job"]
    )
    for hook in hooks:
        annotations = hook["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    role = next(d for d in hooks if d["kind"] == "ClusterRole")
    assert role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": names,
            "verbs": ["patch"],
        }
    ]
    config_map = next(d for d in hooks if d["kind"] == "ConfigMap")
    assert config_map["data"] == crds
    job = next(d for d in hooks if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    args = build_parser(command[1:]).parse_args(command[1:])
    assert args.apply and str(args.source) == pod["containers"][0]["volumeMounts"][0]["mountPath"]
    assert (
        pod["serviceAccountName"]
        == next(d for d in hooks if d["kind"] == "ServiceAccount")["metadata"]["name"]
    )


def test_the_packaged_chart_ships_crds_and_schema_but_not_its_tests(tmp_path: Path) -> None:
    done = run_helm("package", str(CHART), "-d", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (package,) = tmp_path.glob("specdeploy-*.tgz")
    with tarfile.open(package) as archive:
        names = {n.removeprefix("specdeploy/") for n in archive.getnames()}
    assert {"Chart.yaml", "values.schema.json", "templates/_rbac-rules.tpl"} <= names
    assert {f"crds/{p.name}" for p in (CHART / "crds").glob("*.yaml")} <= names
    assert not [n for n in names if n.startswith("tests/")]
