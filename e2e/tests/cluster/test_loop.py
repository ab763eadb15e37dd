"""The loop closed on the local cluster: a plain spec serves, telemetry moves the tables,
every dashboard panel answers, and a Prometheus outage freezes the tables.

Real: the control plane, the operator (its telemetry loop included), Prometheus
3 scraping every serving pod and the operator (file discovery written by the
kubelet stand-in), the add-on's controller, policy, table watcher and metrics
inside each pod, the load generator (``specdeploy load``) and the ConfigMap
volume updates (the stand-in re-syncs mounted ConfigMaps as the kubelet
does). Emulated: the GPUs. Profiling pods run the profiler on the simulator
for their node's GPU type and serving pods run the emulated vLLM server
(``e2e/emulated``), both decided from the pod alone, so the spec below is one
for a real cluster.

One deployment serves the module (``served``): the tests run in file order on
it, each under the load its predecessors left in Prometheus (chat, then
random), and a test run alone first runs the loads it reads. The dashboards'
queries are the chart's JSON with its template variables filled as Grafana
fills them (``e2e/dashboards/panels.py``); the PNGs are drawn from the same
results. ``SPECDEPLOY_DASHBOARDS_OUT`` keeps them in a folder of the caller's
choosing (the README's come from such a run); otherwise they go to the test's
tmp dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.dashboards import panels, render, results
from e2e.localcluster import cluster, processes, service_url
from e2e.localcluster.fleet_view import (
    LOWERED,
    addon_generations,
    addon_steps_by_k,
    load_summary,
    mean_k,
    serving_pods,
    shift_answers,
    start_load,
    tables,
    templates,
)
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.scrape import family_total
from e2e.localcluster.waiting import WaitTimeout, wait_for
from e2e.time_scale import scaled
from specdeploy.operator.naming import deployment_name
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
NAME = "chat"
INTERVAL_S = 6
TIMINGS: dict[str, float] = {}
SCRAPE_S = 2.0
"""The local cluster's scrape interval (``prometheus.DEFAULT_SCRAPE_INTERVAL``)."""
DASHBOARDS_OUT = "SPECDEPLOY_DASHBOARDS_OUT"
GPU_TYPES = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S")


def plain_spec() -> Obj:
    """What a user writes for a real cluster: no backend, preset or pod annotations."""
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "llama"},
            "speculation": {
                "method": "eagle3",
                "draftModel": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "maxK": 5,
            },
            "pools": [{"gpuType": gpu} for gpu in GPU_TYPES],
            "telemetry": {"interval": f"{INTERVAL_S}s"},
        },
    }


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster
    if TIMINGS:
        print("\nloop e2e timings (s):", json.dumps(TIMINGS, indent=1))


def status(admin: KubeApi, namespace: str) -> Obj:
    body: Obj = admin.get(paths.path("SpeculativeDeployment", namespace, NAME))
    return body.get("status") or {}


def condition(current: Obj, kind: str) -> Obj:
    return next((c for c in current.get("conditions", []) if c["type"] == kind), {})


def telemetry_intervals(local: cluster.Cluster) -> float:
    """Telemetry intervals the operator has run (one deployment in this module): its clock."""
    address = f"127.0.0.1:{local.state.ports.operator_metrics}"
    return family_total(address, "specdeploy_operator_telemetry_intervals")


def status_pools(admin: KubeApi, namespace: str) -> list[Obj]:
    pools: list[Obj] = status(admin, namespace).get("pools", [])
    return pools


def timed(label: str, started: float) -> float:
    TIMINGS[label] = round(time.monotonic() - started, 1)
    return TIMINGS[label]


@dataclass
class Served:
    """The module's deployment: where it answers, and the loads it has had (Unix times)."""

    namespace: str
    url: str
    folder: Path
    first_load_at: float | None = None
    loads: list[str] = field(default_factory=list)

    def load(self, workload: str, seconds: int) -> subprocess.Popen[bytes]:
        """Start ``workload`` for ``seconds`` in the background (its report in ``folder``)."""
        if self.first_load_at is None:
            self.first_load_at = time.time()
        self.loads.append(workload)
        return start_load(self.url, "llama", workload, seconds, self.report(workload))

    def report(self, workload: str) -> Path:
        return self.folder / f"{workload}-{self.loads.count(workload)}.json"


@pytest.fixture(scope="module")
def served(
    operator: cluster.Cluster,
    admin: KubeApi,
    module_namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Served:
    """The plain spec applied and Ready (the operator profiles on the simulator first)."""
    started = time.monotonic()
    admin.post(paths.path("SpeculativeDeployment", module_namespace), plain_spec())
    wait_for(
        lambda: status(admin, module_namespace).get("phase") == "Ready",
        what="the plain spec to reach Ready",
        timeout=240,
    )
    timed("plain spec Ready", started)
    url = service_url.find(operator.layout.root, module_namespace, NAME, wait=60)
    return Served(module_namespace, url, tmp_path_factory.mktemp("loop"))


def test_a_plain_spec_serves_and_live_telemetry_moves_the_tables_without_restarts(
    operator: cluster.Cluster, admin: KubeApi, served: Served
) -> None:
    namespace = served.namespace
    ready = status(admin, namespace)
    assert ready["endpoint"] == f"http://{NAME}.{namespace}.svc:8000"
    assert {p["profileSource"] for p in ready["pools"]} == {"modelled"}

    chat = load_summary(served.load("chat", 20), served.report("chat"))
    assert 0 < chat["requests"]["ok"] == chat["requests"]["sent"]  # none refused either

    def live_and_healthy() -> Obj | None:
        current = status(admin, namespace)
        lives = [p.get("live") or {} for p in current.get("pools", [])]
        healthy = condition(current, "TelemetryHealthy").get("status") == "True"
        return current if healthy and lives and all(lv.get("confident") for lv in lives) else None

    live = wait_for(live_and_healthy, what="confident live acceptance in status", timeout=60)
    assert all(0.3 < p["live"]["perPosition"][0] <= 1.0 for p in live["pools"])

    pods, template, before = serving_pods(admin, namespace), templates(admin, namespace), None
    before = tables(admin, namespace)
    generations = addon_generations(admin, namespace)
    assert len(pods) == 2 and all(pods.values())

    shifted, ticks_before = time.monotonic(), telemetry_intervals(operator)
    steps_before = addon_steps_by_k(admin, namespace)
    random_load = served.load("random", 45)
    random_report = served.report("random")

    def answered() -> dict[str, str] | None:
        found = shift_answers(admin, namespace, NAME, before, steps_before, GPU_TYPES)
        return found if len(found) == len(GPU_TYPES) else None

    # The operator's decision, counted in its own telemetry intervals (not seconds: a
    # loaded box runs each interval late, never more of them): within three intervals of
    # the new traffic, plus the one under way when it began.
    try:
        answers = wait_for(answered, what="every pool answering the random text", timeout=90)
    except WaitTimeout:
        found = shift_answers(admin, namespace, NAME, before, steps_before, GPU_TYPES)
        pytest.fail(
            f"pools answered in 90 s: {found}; pools: {json.dumps(status_pools(admin, namespace))}"
        )
    ticks = telemetry_intervals(operator) - ticks_before
    timed("traffic shift to every pool answered", shifted)
    print(f"\nloop e2e: each pool's answer to random text: {answers}")
    lowered = [gpu for gpu, answer in answers.items() if answer == LOWERED]
    assert lowered, f"no table lowered by the operator: {answers}"
    assert ticks <= 4, f"{ticks} telemetry intervals before the tables were lowered"
    now = tables(admin, namespace)
    assert all(mean_k(now[n]) <= mean_k(before[n]) for n in before), "a table was raised"

    lowered_pods = tuple(f"{deployment_name(NAME, gpu)}-" for gpu in lowered)

    def in_force() -> bool:
        reloaded = addon_generations(admin, namespace)
        return all(reloaded[p] > generations[p] for p in generations if p.startswith(lowered_pods))

    # The delivery (ConfigMap volume, the stand-in's re-sync, the add-on's reload).
    wait_for(in_force, what="the lower-K tables in force in every pod", timeout=scaled(60))
    timed("traffic shift to every pod on a lower-K table", shifted)
    drift = condition(status(admin, namespace), "TablesCurrent")
    assert drift.get("reason") == "AcceptanceDrift", drift
    assert serving_pods(admin, namespace) == pods, "a pod restarted or was replaced"
    assert templates(admin, namespace) == template, "the pod template changed"
    random_summary = load_summary(random_load, random_report)
    assert random_summary["requests"]["ok"] == random_summary["requests"]["sent"]


def test_every_dashboard_query_returns_data_and_the_boards_render(
    operator: cluster.Cluster, served: Served, tmp_path: Path
) -> None:
    started = time.monotonic()
    # Run alone, the module's loads have not happened: chat (high acceptance) then
    # random (low), so K moves; after the loop test, its loads are the data.
    for workload in ("chat", "random"):
        if workload not in served.loads:
            summary = load_summary(served.load(workload, 30), served.report(workload))
            assert summary["requests"]["ok"] > 0, summary
    assert served.first_load_at is not None
    load_started = served.first_load_at

    boards = panels.load()
    assert {b.uid for b in boards} == {"specdeploy-fleet", "specdeploy-pool"}
    chosen = {"namespace": served.namespace, "deployment": NAME}

    def collect() -> list[results.BoardResult]:
        window = time.time() - load_started + 20
        return results.collect(
            boards, operator.prometheus_url, window_s=window, scrape_s=SCRAPE_S, chosen=chosen
        )

    try:
        collected = wait_for(
            lambda: None if results.empty(got := collect()) else got,
            what="every panel query to return data",
            timeout=30,
            interval=3,
        )
    except WaitTimeout:
        problems = "\n".join(results.empty(collect()))
        pytest.fail(f"panel queries without data:\n{problems}")
    queries = sum(len(p.results) for b in collected for p in b.panels)
    assert queries >= 40, f"only {queries} queries: the boards lost panels"

    out = Path(os.environ.get(DASHBOARDS_OUT) or tmp_path / "dashboards")
    pngs = render.render_results(collected, out)
    assert sorted(p.name for p in pngs) == ["specdeploy-fleet.png", "specdeploy-pool.png"]
    assert all(p.stat().st_size > 50_000 for p in pngs), [p.stat().st_size for p in pngs]
    # The command make demo's helper runs: All namespaces, the pool board's first pool.
    cli_out = tmp_path / "cli"
    argv = ["--prometheus", operator.prometheus_url, "--out", str(cli_out), "--window", "120"]
    assert render.main([*argv, "--scrape-interval", str(SCRAPE_S)]) == 0
    assert sorted(p.name for p in cli_out.glob("*.png")) == [p.name for p in sorted(pngs)]
    print(f"\ndashboards e2e: {time.monotonic() - started:.0f} s; PNGs: {[str(p) for p in pngs]}")


def test_with_prometheus_down_the_tables_freeze_and_health_returns_with_it(
    operator: cluster.Cluster, admin: KubeApi, served: Served
) -> None:
    namespace = served.namespace
    pods = serving_pods(admin, namespace)
    # Prometheus down under traffic: tables frozen, the condition says why; back: healthy
    background = served.load("chat", 120)
    assert cluster.stop(operator, "prometheus")
    stopped = time.monotonic()
    try:
        unhealthy = wait_for(
            lambda: (
                condition(status(admin, namespace), "TelemetryHealthy").get("status") == "False"
                and status(admin, namespace)
            ),
            what="TelemetryHealthy False with Prometheus down",
            timeout=4 * INTERVAL_S + 20,
        )
        timed("Prometheus down to TelemetryHealthy False", stopped)
        assert condition(unhealthy, "TelemetryHealthy")["reason"] == "PrometheusUnreachable"
        frozen = tables(admin, namespace)
        time.sleep(2 * INTERVAL_S)
        assert tables(admin, namespace) == frozen
    finally:
        cluster.start_prometheus(operator, log=lambda _m: None)
    restarted = time.monotonic()
    wait_for(
        lambda: condition(status(admin, namespace), "TelemetryHealthy").get("status") == "True",
        what="TelemetryHealthy True once Prometheus is back",
        timeout=6 * INTERVAL_S + 30,
    )
    timed("Prometheus back to TelemetryHealthy True", restarted)
    background.terminate()  # its summary is not the point; the pods' survival is
    background.wait(timeout=60)
    assert serving_pods(admin, namespace) == pods
    assert any(r.name == "prometheus" for r in processes.read_records(operator.layout.run))
