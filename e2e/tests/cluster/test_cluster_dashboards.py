"""Every panel of the chart's dashboards returns data from the emulated fleet under load.

Real: the control plane, the operator, Prometheus 3 scraping every serving
pod and the operator, the add-on in each pod, ``specdeploy load``. Emulated:
the GPUs (the loop test's set-up: ``test_loop.plain_spec``). The queries are
the chart's JSON with its template variables filled as Grafana fills them
(``e2e/dashboards/panels.py``); the PNGs are drawn from the same results.
``SPECDEPLOY_DASHBOARDS_OUT`` keeps them in a folder of the caller's choosing
(the README's come from such a run); otherwise they go to the test's tmp dir.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.dashboards import panels, render, results
from e2e.localcluster import cluster, service_url
from e2e.localcluster.fleet_view import load_summary, start_load
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import WaitTimeout, wait_for
from e2e.tests.cluster.test_loop import NAME, plain_spec, status
from specdeploy.runtime.kube import paths

LOAD_S = 30
"""Seconds of each workload: chat (high acceptance) then random (low), so K moves."""
SCRAPE_S = 2.0
"""The local cluster's scrape interval (``prometheus.DEFAULT_SCRAPE_INTERVAL``)."""
OUT_ENV = "SPECDEPLOY_DASHBOARDS_OUT"


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster


def test_every_dashboard_query_returns_data_and_the_boards_render(
    operator: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    admin.post(paths.path("SpeculativeDeployment", namespace), plain_spec())
    wait_for(
        lambda: status(admin, namespace).get("phase") == "Ready",
        what="the plain spec to reach Ready",
        timeout=240,
    )
    url = service_url.find(operator.layout.root, namespace, NAME, wait=60)
    load_started = time.time()
    for workload in ("chat", "random"):
        report = tmp_path / f"{workload}.json"
        summary = load_summary(start_load(url, "llama", workload, LOAD_S, report), report)
        assert summary["requests"]["ok"] > 0, summary

    boards = panels.load()
    assert {b.uid for b in boards} == {"specdeploy-fleet", "specdeploy-pool"}
    chosen = {"namespace": namespace, "deployment": NAME}

    def all_answered() -> list[results.BoardResult] | None:
        window = time.time() - load_started + 20
        got = results.collect(
            boards, operator.prometheus_url, window_s=window, scrape_s=SCRAPE_S, chosen=chosen
        )
        return None if results.empty(got) else got

    try:
        collected = wait_for(
            all_answered, what="every panel query to return data", timeout=30, interval=3
        )
    except WaitTimeout:
        window = time.time() - load_started + 20
        got = results.collect(
            boards, operator.prometheus_url, window_s=window, scrape_s=SCRAPE_S, chosen=chosen
        )
        problems = "\n".join(results.empty(got))
        pytest.fail(f"panel queries without data:\n{problems}")
    queries = sum(len(p.results) for b in collected for p in b.panels)
    assert queries >= 40, f"only {queries} queries: the boards lost panels"

    out = Path(os.environ.get(OUT_ENV) or tmp_path / "dashboards")
    pngs = render.render_results(collected, out)
    assert sorted(p.name for p in pngs) == ["specdeploy-fleet.png", "specdeploy-pool.png"]
    assert all(p.stat().st_size > 50_000 for p in pngs), [p.stat().st_size for p in pngs]
    # The command make demo's helper runs: All namespaces, the pool board's first pool.
    cli_out = tmp_path / "cli"
    argv = ["--prometheus", operator.prometheus_url, "--out", str(cli_out), "--window", "120"]
    assert render.main([*argv, "--scrape-interval", str(SCRAPE_S)]) == 0
    assert sorted(p.name for p in cli_out.glob("*.png")) == [p.name for p in sorted(pngs)]
    print(f"\ndashboards e2e: {time.monotonic() - started:.0f} s; PNGs: {[str(p) for p in pngs]}")
