"""Prometheus 3 in the session cluster: file-SD targets are scraped with the contract labels.

A tiny local HTTP server plays a serving pod's two metrics endpoints (vLLM's
and the add-on's); the test writes its target file as the kubelet stand-in
will, then reads the series back through Prometheus' HTTP API.
"""

from __future__ import annotations

import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import binaries, cluster, processes, prometheus
from e2e.localcluster.metrics_endpoint import serve_metrics
from e2e.localcluster.waiting import wait_for

SCRAPE_WAIT = 60.0
POD_LABELS = {
    "specdeploy.io/deployment": "chat",
    "specdeploy.io/pool": "h100",
    "specdeploy.io/profile": "chat-h100-1",
}


def _metrics_server(body: str) -> ThreadingHTTPServer:
    """A loopback /metrics endpoint serving ``body`` in the text format, in a thread."""
    return serve_metrics(body.encode)


@pytest.fixture
def metric() -> str:
    """A metric name no other test (or earlier session) has written."""
    return f"specdeploy_test_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def endpoints(metric: str) -> Iterator[tuple[str, str]]:
    vllm = _metrics_server(f'# TYPE {metric} gauge\n{metric}{{source="vllm"}} 42\n')
    addon = _metrics_server(f'# TYPE {metric} gauge\n{metric}{{source="addon"}} 7\n')
    try:
        yield tuple(f"127.0.0.1:{s.server_address[1]}" for s in (vllm, addon))  # type: ignore[misc]
    finally:
        for server in (vllm, addon):
            server.shutdown()
            server.server_close()


def _series_if(base: str, query: str, *, count: int) -> list[dict[str, Any]] | None:
    found = prometheus.instant_query(base, query)
    return found if len(found) == count else None


def _active_addresses(base: str) -> set[str]:
    active = prometheus.api_get(base, "/api/v1/targets", state="active")["activeTargets"]
    return {t["labels"].get("instance", "") for t in active} | {
        t["discoveredLabels"].get("__address__", "") for t in active
    }


def test_prometheus_is_ready_and_scrapes_itself(local_cluster: cluster.Cluster) -> None:
    base = local_cluster.prometheus_url
    with urllib.request.urlopen(f"{base}/-/ready", timeout=5) as response:
        assert response.status == 200

    up = wait_for(
        lambda: prometheus.instant_query(base, 'up{job="prometheus"} == 1'),
        what="Prometheus' own up series",
        timeout=SCRAPE_WAIT,
    )

    assert up[0]["value"][1] == "1"
    build = prometheus.instant_query(base, "prometheus_build_info")
    assert build and build[0]["metric"]["version"].startswith("3.")


def test_a_pods_target_file_is_scraped_with_the_contract_labels_and_its_removal_drops_it(
    local_cluster: cluster.Cluster, metric: str, endpoints: tuple[str, str]
) -> None:
    base, directory = local_cluster.prometheus_url, local_cluster.prometheus_targets
    api, addon = endpoints
    pod = f"chat-{uuid.uuid4().hex[:6]}"
    groups = prometheus.pod_target_groups("team-a", pod, POD_LABELS, api=api, addon=addon)
    name = f"team-a.{pod}"

    prometheus.write_targets(directory, name, groups)
    try:
        found = wait_for(
            lambda: _series_if(base, metric, count=2),
            what=f"both series of {metric} through Prometheus",
            timeout=SCRAPE_WAIT,
        )
    finally:
        removed = prometheus.remove_targets(directory, name)
    gone = wait_for(
        lambda: not ({api, addon} & _active_addresses(base)),
        what=f"{api} and {addon} dropped from /api/v1/targets",
        timeout=SCRAPE_WAIT,
    )

    by_source = {s["metric"]["source"]: s for s in found}
    contract = {
        "namespace": "team-a",
        "pod": pod,
        "specdeploy_deployment": "chat",
        "specdeploy_pool": "h100",
        "specdeploy_profile": "chat-h100-1",
    }
    assert by_source["vllm"]["metric"] == {
        "__name__": metric,
        "source": "vllm",
        "job": "vllm",
        "instance": api,
        **contract,
    }
    assert by_source["addon"]["metric"]["job"] == "specdeploy-addon"
    assert by_source["addon"]["metric"]["instance"] == addon
    assert (by_source["vllm"]["value"][1], by_source["addon"]["value"][1]) == ("42", "7")
    assert removed and gone


def test_promtool_accepts_the_config_the_harness_renders(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    rendered = prometheus.render_config(
        targets=tmp_path / "targets", self_address="127.0.0.1:9090", interval="2s"
    )
    prometheus.write_config(config, rendered)
    promtool = binaries.Binaries.for_checkout().path("promtool")

    done = subprocess.run(
        [str(promtool), "check", "config", str(config)], capture_output=True, text=True
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_session_clusters_prometheus_keeps_its_store_in_the_workdir(
    local_cluster: cluster.Cluster,
) -> None:
    layout = local_cluster.layout
    (record,) = [r for r in processes.read_records(layout.run) if r.name == "prometheus"]
    argv = Path(f"/proc/{record.pid}/cmdline").read_text().split("\0")

    assert f"--storage.tsdb.path={layout.prometheus / 'data'}" in argv
    assert any((layout.prometheus / "data").iterdir())  # its TSDB (lock, WAL) is there
    assert local_cluster.prometheus_targets == layout.prometheus / "targets"
