"""The operator's own /metrics on the local cluster: Prometheus finds and scrapes it.

Real: the operator as a process (``specdeploy operator run --metrics-port``),
Prometheus 3 reading the target file ``cluster.start_operator`` writes (job
``specdeploy-operator``), and its HTTP API. What a chart's PodMonitor does in a
real cluster, the file does here; ``cluster.stop`` withdraws it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.localcluster import cluster, prometheus
from e2e.localcluster.waiting import wait_for

SCRAPE_WAIT = 30.0
JOB = 'job="specdeploy-operator"'


@pytest.fixture
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """CRDs installed and the operator running; stopped (and its target withdrawn) after."""
    with cluster.operator_running(local_cluster):
        yield local_cluster


def _active_instances(base: str) -> set[str]:
    active = prometheus.api_get(base, "/api/v1/targets", state="active")["activeTargets"]
    return {t["labels"].get("instance", "") for t in active}


def test_prometheus_scrapes_the_operators_metrics_and_drops_them_when_it_stops(
    operator: cluster.Cluster,
) -> None:
    base = operator.prometheus_url
    address = f"127.0.0.1:{operator.state.ports.operator_metrics}"

    (info,) = wait_for(
        lambda: prometheus.instant_query(base, f"specdeploy_operator_info{{{JOB}}}"),
        what="specdeploy_operator_info through Prometheus",
        timeout=SCRAPE_WAIT,
    )
    families = {
        s["metric"]["__name__"]
        for s in prometheus.instant_query(base, f'{{{JOB}, __name__=~"specdeploy_operator_.+"}}')
    }
    stopped = cluster.stop(operator, "operator")
    gone = wait_for(
        lambda: address not in _active_instances(base),
        what=f"{address} dropped from /api/v1/targets",
        timeout=SCRAPE_WAIT,
    )

    assert info["metric"]["instance"] == address
    assert info["metric"]["version"] and info["value"][1] == "1"
    assert {
        "specdeploy_operator_reconciles_total",
        "specdeploy_operator_promql_queries_total",
        "specdeploy_operator_deployments",
    } <= families
    assert stopped and gone
    assert not (operator.prometheus_targets / f"{prometheus.OPERATOR_TARGETS}.json").exists()
