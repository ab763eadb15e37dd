"""The loop closed on the local cluster: a plain spec serves, telemetry moves the tables.

Real: the control plane, the operator (its telemetry loop included), Prometheus
3 scraping every serving pod (file discovery written by the kubelet stand-in),
the add-on's controller, policy, table watcher and metrics inside each pod,
the load generator (``specdeploy load``) and the ConfigMap volume updates
(the stand-in re-syncs mounted ConfigMaps as the kubelet does). Emulated: the
GPUs. Profiling pods run the profiler on the simulator for their node's GPU
type and serving pods run the emulated vLLM server (``e2e/emulated``), both
decided from the pod alone, so the spec below is one for a real cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import cluster, processes, service_url
from e2e.localcluster.fleet_view import (
    addon_generations,
    load_summary,
    mean_k,
    serving_pods,
    start_load,
    tables,
    templates,
)
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.scrape import family_total
from e2e.localcluster.waiting import wait_for
from e2e.time_scale import scaled
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
NAME = "chat"
INTERVAL_S = 6
TIMINGS: dict[str, float] = {}


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
            "pools": [{"gpuType": "NVIDIA-H100-80GB-HBM3"}, {"gpuType": "NVIDIA-L40S"}],
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


def timed(label: str, started: float) -> float:
    TIMINGS[label] = round(time.monotonic() - started, 1)
    return TIMINGS[label]


def test_a_plain_spec_serves_and_live_telemetry_moves_the_tables_without_restarts(
    operator: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    admin.post(paths.path("SpeculativeDeployment", namespace), plain_spec())
    ready = wait_for(
        lambda: (s := status(admin, namespace)).get("phase") == "Ready" and s,
        what="the plain spec to reach Ready",
        timeout=240,
    )
    timed("plain spec Ready", started)
    assert ready["endpoint"] == f"http://{NAME}.{namespace}.svc:8000"
    assert {p["profileSource"] for p in ready["pools"]} == {"modelled"}

    url = service_url.find(operator.layout.root, namespace, NAME, wait=60)
    chat = load_summary(
        start_load(url, "llama", "chat", 20, tmp_path / "chat.json"), tmp_path / "chat.json"
    )
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
    random_load = start_load(url, "llama", "random", 60, tmp_path / "random.json")

    def tables_lowered() -> bool:
        now = tables(admin, namespace)
        return all(mean_k(now[n]) < mean_k(before[n]) for n in before)

    # The operator's decision, counted in its own telemetry intervals (not seconds: a
    # loaded box runs each interval late, never more of them): within three intervals of
    # the new traffic, plus the one under way when it began.
    wait_for(tables_lowered, what="lower-K tables written", timeout=90)
    ticks = telemetry_intervals(operator) - ticks_before
    timed("traffic shift to lower-K tables written", shifted)
    assert ticks <= 4, f"{ticks} telemetry intervals before the tables were lowered"

    def in_force() -> bool:
        reloaded = addon_generations(admin, namespace)
        return all(reloaded[p] > generations[p] for p in generations)

    # The delivery (ConfigMap volume, the stand-in's re-sync, the add-on's reload).
    wait_for(in_force, what="the lower-K tables in force in every pod", timeout=scaled(60))
    timed("traffic shift to every pod on a lower-K table", shifted)
    drift = condition(status(admin, namespace), "TablesCurrent")
    assert drift.get("reason") == "AcceptanceDrift", drift
    assert serving_pods(admin, namespace) == pods, "a pod restarted or was replaced"
    assert templates(admin, namespace) == template, "the pod template changed"
    random_summary = load_summary(random_load, tmp_path / "random.json")
    assert random_summary["requests"]["ok"] == random_summary["requests"]["sent"]

    # Prometheus down under traffic: tables frozen, the condition says why; back: healthy
    background = start_load(url, "llama", "chat", 120, tmp_path / "outage.json")
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
