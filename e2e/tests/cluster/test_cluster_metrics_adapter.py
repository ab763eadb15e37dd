"""The real HPA controller scales a Deployment on the operator's wanted-replicas gauge.

The whole ``autoscaling.mode: hpa`` chain, from real components: a loopback
``/metrics`` endpoint plays the operator and exports
``specdeploy_operator_pool_wanted_replicas`` with a value the test sets; the cluster's
Prometheus scrapes it through a file-SD target; prometheus-adapter v0.12.0
serves it as ``custom.metrics.k8s.io/v1beta2`` through the aggregation layer
(front-proxy certificates, ``metrics_adapter``); an ``autoscaling/v2`` HPA
with an Object metric on the Deployment (target ``AverageValue`` 1) makes the
HPA controller in kube-controller-manager scale KWOK pods to the value.

The adapter's own audit log says who it served: the HPA controller's
ServiceAccount, forwarded by the aggregator, and never ``system:anonymous``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from e2e.localcluster import cluster, metrics_adapter, objects, processes, prometheus
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.metrics_endpoint import serve_metrics
from e2e.localcluster.waiting import wait_for
from specdeploy.chart.adapter_rules import DEPLOYMENT_LABEL, METRIC, NAMESPACE_LABEL
from specdeploy.runtime.kube import paths

SCALE_TIMEOUT = 60.0
TIMINGS: dict[str, float] = {}


class Gauge:
    """The exported value, set by the test while the endpoint serves it."""

    def __init__(self, namespace: str, deployment: str, value: float) -> None:
        self.labels = f'{NAMESPACE_LABEL}="{namespace}",{DEPLOYMENT_LABEL}="{deployment}"'
        self.value = value

    def exposition(self) -> bytes:
        return f"# TYPE {METRIC} gauge\n{METRIC}{{{self.labels}}} {self.value}\n".encode()


def _serve(gauge: Gauge) -> ThreadingHTTPServer:
    return serve_metrics(gauge.exposition)


@pytest.fixture
def gauge(local_cluster: cluster.Cluster, namespace: str) -> Iterator[Gauge]:
    """The operator's stand-in endpoint, scraped by the cluster's Prometheus meanwhile."""
    exported = Gauge(namespace, "pool", 3)
    server = _serve(exported)
    name = f"adapter-test-{uuid.uuid4().hex[:6]}"
    group = prometheus.TargetGroup((f"127.0.0.1:{server.server_address[1]}",), {"job": name})
    prometheus.write_targets(local_cluster.prometheus_targets, name, [group])
    try:
        yield exported
    finally:
        prometheus.remove_targets(local_cluster.prometheus_targets, name)
        server.shutdown()
        server.server_close()


@pytest.fixture
def adapter(local_cluster: cluster.Cluster) -> Iterator[metrics_adapter.MetricsAdapter]:
    started = time.monotonic()
    with metrics_adapter.running(local_cluster, log=lambda _m: None) as running:
        TIMINGS["adapter_available_s"] = round(time.monotonic() - started, 1)
        yield running


def _hpa(name: str, namespace: str) -> dict[str, Any]:
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    quick = {"type": "Pods", "value": 10, "periodSeconds": 1}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": target,
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Object",
                    "object": {
                        "describedObject": target,
                        "metric": {"name": METRIC},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            # Short windows (defaults: 0 s up, 300 s down) so the test sees both directions.
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [quick]},
                "scaleDown": {"stabilizationWindowSeconds": 3, "policies": [quick]},
            },
        },
    }


def _metric_path(namespace: str, deployment: str) -> str:
    group = f"/apis/{metrics_adapter.GROUP}/{metrics_adapter.VERSION}"
    return f"{group}/namespaces/{namespace}/deployments.apps/{deployment}/{METRIC}"


def _served_value(admin: KubeApi, path: str) -> float | None:
    """The metric as the custom metrics API serves it (None while the adapter has no series)."""
    try:
        answer = admin.get(path)
    except ApiError as err:
        if err.status in (404, 503):
            return None
        raise
    items = answer.get("items", [])
    return _quantity(items[0]["value"]) if items else None


def _quantity(value: str) -> float:
    """A resource.Quantity as the adapter writes metric values ("3", "1500m")."""
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _replicas(admin: KubeApi, namespace: str, name: str) -> int:
    spec: int = admin.get(paths.path("Deployment", namespace, name))["spec"]["replicas"]
    return spec


def _timed_wait(what: str, poll: Any) -> float:
    started = time.monotonic()
    wait_for(poll, what=what, timeout=SCALE_TIMEOUT, interval=0.5)
    return round(time.monotonic() - started, 1)


def test_the_hpa_controller_may_read_custom_metrics_and_anonymous_may_not(
    admin: KubeApi,
) -> None:
    # The bootstrap ClusterRole covers it: the harness adds no RBAC for the HPA controller.
    assert metrics_adapter.hpa_may_read_custom_metrics(admin)
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:anonymous",
            "groups": ["system:unauthenticated"],
            "resourceAttributes": {
                "group": metrics_adapter.GROUP,
                "resource": "deployments.apps",
                "verb": "get",
            },
        },
    }
    answer = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert not answer["status"].get("allowed")


def test_the_real_hpa_scales_a_deployment_up_and_down_on_the_wanted_replicas_gauge(
    admin: KubeApi,
    namespace: str,
    gauge: Gauge,
    adapter: metrics_adapter.MetricsAdapter,
) -> None:
    template = objects.pod_template({"app": "pool"}, [objects.container(["serve"])])
    admin.create(objects.deployment("pool", namespace, template, replicas=1))
    metric = _metric_path(namespace, "pool")
    TIMINGS["metric_served_s"] = _timed_wait(
        "the adapter to serve the gauge at 3", lambda: _served_value(admin, metric) == 3
    )

    admin.post(
        f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers",
        _hpa("pool", namespace),
    )
    TIMINGS["scale_up_1_to_3_s"] = _timed_wait(
        "the HPA to scale pool to 3", lambda: _replicas(admin, namespace, "pool") == 3
    )
    gauge.value = 1
    TIMINGS["scale_down_3_to_1_s"] = _timed_wait(
        "the HPA to scale pool back to 1", lambda: _replicas(admin, namespace, "pool") == 1
    )
    print("\nmetrics adapter e2e timings (s, measured):", json.dumps(TIMINGS))

    served = [c for c in metrics_adapter.callers(adapter.audit_log) if METRIC in c.uri]
    users = {c.user for c in served}
    assert metrics_adapter.HPA_USER in users, users
    assert any(c.user == metrics_adapter.HPA_USER and c.code == 200 for c in served)
    # Before the adapter has loaded the front proxy's CA, the harness's own readiness probe
    # is anonymous (and refused); nothing else may be.
    calls = metrics_adapter.callers(adapter.audit_log)
    anonymous = [c for c in calls if c.user == "system:anonymous"]
    assert all(c.user_agent == metrics_adapter.PROBE_USER for c in anonymous), anonymous
    assert all(c.code == 403 for c in anonymous), anonymous


def test_a_stopped_adapter_leaves_no_apiservice_to_break_discovery(
    local_cluster: cluster.Cluster, admin: KubeApi
) -> None:
    with metrics_adapter.running(local_cluster, log=lambda _m: None):
        groups = {g["name"] for g in admin.get("/apis")["groups"]}
        assert metrics_adapter.GROUP in groups

    assert admin.get_or_none(metrics_adapter.API_SERVICE_PATH) is None
    # The aggregator drops the group from discovery through its informer: soon, not at once.
    wait_for(
        lambda: metrics_adapter.GROUP not in {g["name"] for g in admin.get("/apis")["groups"]},
        what=f"{metrics_adapter.GROUP} gone from /apis",
        timeout=15,
    )
    assert not [
        r
        for r in processes.read_records(local_cluster.layout.run)
        if r.name == "prometheus-adapter"
    ]
