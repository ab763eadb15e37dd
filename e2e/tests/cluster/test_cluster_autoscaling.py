"""Autoscaling on the local cluster: load grows a pool within its bounds, quiet shrinks it.

Real: the control plane, the operator and its telemetry loop, Prometheus 3
scraping the serving pods, the add-on in each pod, the gateway in front of the
Service's ready endpoints, ``specdeploy load``. Emulated: the GPUs (the loop
test's set-up, ``test_loop.plain_spec``), so a replica's speed, and with it
the capacity the operator computes, is the emulated H100's.

``mode: operator``: the operator writes the pool Deployment's replicas from
the capacity model. The ramp is load at high concurrency until the pool
grows, then light load until it shrinks after the down window; every request
the load generator started must end ok (a retriable refusal would be allowed,
a failure or a hang not), and replicas never exceed ``max``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import cluster, service_url
from e2e.localcluster.fleet_view import load_summary, start_load
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from e2e.tests.cluster.test_loop import plain_spec
from specdeploy.operator.scaling import capacity_of
from specdeploy.runtime.kube import paths
from specdeploy.runtime.profile import parse_profile
from specdeploy.runtime.schedule import derive_schedule

Obj = dict[str, Any]
NAME = "scaled"
GPU = "NVIDIA-H100-80GB-HBM3"
MAX_REPLICAS = 3
DOWN_WINDOW_S = 20
TPOT_TARGET_MS = 50.0
"""The spec's first target; the test then sets the one ``sized_target`` picks."""
REPLICA_TOKENS_PER_S = 1500.0
"""One replica's capacity the test sizes for: a 2-core box drives about 6000 tokens/s
through the gateway at concurrency 24 and a few hundred at concurrency 1."""


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster


def scaled_spec() -> Obj:
    spec = plain_spec()
    spec["metadata"]["name"] = NAME
    spec["spec"]["pools"] = [{"gpuType": GPU, "replicas": {"min": 1, "max": MAX_REPLICAS}}]
    spec["spec"]["autoscaling"] = {
        "mode": "operator",
        "tpotTargetMs": TPOT_TARGET_MS,
        "scaleDownWindowSeconds": DOWN_WINDOW_S,
    }
    return spec


def sized_target(admin: KubeApi, namespace: str) -> float:
    """The tightest TPOT target at which one replica serves about ``REPLICA_TOKENS_PER_S``.

    Read from the pool's own profile (the emulated H100's, profiled on the simulator), so
    the test does not hard-code the emulator's speed: the load this box can generate then
    needs more than one replica, and light load needs one.
    """
    body = admin.get(paths.path("SpeculativeDeployment", namespace, NAME))
    name = body["status"]["pools"][0]["profile"]
    profile = parse_profile(admin.get(paths.path("SpeculationProfile", namespace, name))).spec
    schedule = tuple(tuple(r) for r in derive_schedule(profile))
    for step in range(4, 400):
        target_ms = step * 0.25
        found = capacity_of(profile, schedule, None, tpot_target_s=target_ms / 1000)  # type: ignore[arg-type]
        if found is not None and found.tokens_per_second >= REPLICA_TOKENS_PER_S:
            return target_ms
    raise AssertionError(f"no target up to 100 ms gives {REPLICA_TOKENS_PER_S} tokens/s")


class Timeline:
    """The pool Deployment's replicas and the status's wanted count, sampled every second."""

    def __init__(self, admin: KubeApi, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.rows: list[Obj] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.rows.append(self.sample())
            except Exception as err:  # a sample missed is a gap, not a failure
                self.rows.append({"t": self.now(), "error": str(err)})

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def sample(self) -> Obj:
        body = self.admin.get(paths.path("SpeculativeDeployment", self.namespace, NAME))
        pools = (body.get("status") or {}).get("pools") or [{}]
        scaling = pools[0].get("autoscaling") or {}
        deployments = self.admin.get(paths.path("Deployment", self.namespace)).get("items") or []
        mine = [d for d in deployments if d["metadata"]["name"].startswith(f"{NAME}-")]
        spec = mine[0]["spec"].get("replicas") if mine else None
        ready = (mine[0].get("status") or {}).get("readyReplicas", 0) if mine else 0
        return {
            "t": self.now(),
            "replicas": spec,
            "ready": ready,
            "wanted": scaling.get("wantedReplicas"),
            "capacity": scaling.get("capacityTokensPerSecond"),
            "demand": scaling.get("demandTokensPerSecond"),
            "limitedBy": scaling.get("limitedBy"),
        }

    def replicas(self) -> int:
        return int(self.sample()["replicas"] or 0)


def test_operator_mode_grows_the_pool_under_load_and_shrinks_it_after_the_window(
    operator: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> None:
    admin.post(paths.path("SpeculativeDeployment", namespace), scaled_spec())
    wait_for(
        lambda: (
            (
                admin.get(paths.path("SpeculativeDeployment", namespace, NAME)).get("status") or {}
            ).get("phase")
            == "Ready"
        ),
        what="the autoscaled spec to reach Ready",
        timeout=240,
    )
    target_ms = sized_target(admin, namespace)
    admin.merge_patch(
        paths.path("SpeculativeDeployment", namespace, NAME),
        {"spec": {"autoscaling": {"tpotTargetMs": target_ms}}},
    )
    url = service_url.find(operator.layout.root, namespace, NAME, wait=60)
    reactions: dict[str, float] = {"tpot_target_ms": target_ms}
    timeline = Timeline(admin, namespace)
    try:
        _ramp(timeline, url, tmp_path, reactions)
    finally:
        rows = [r for r in timeline.rows if "error" not in r]
        (tmp_path / "timeline.json").write_text(json.dumps(rows))
        print(f"\nautoscaling e2e reactions: {reactions}; timeline: {tmp_path / 'timeline.json'}")
        print("samples:", json.dumps(rows[:: max(1, len(rows) // 25)]))
    heavy_summary = json.loads((tmp_path / "heavy.json").read_text())["summary"]
    requests = heavy_summary["requests"]
    # every request ended: ok, or refused with a retriable status; none failed or hung
    assert requests["failed"] == requests["timed_out"] == 0 and requests["ok"] > 0, requests
    assert max(int(r["replicas"] or 0) for r in rows) <= MAX_REPLICAS
    changes = [
        (a["t"], b["replicas"])
        for a, b in itertools.pairwise(rows)
        if a["replicas"] != b["replicas"]
    ]
    counts = [n for _, n in changes]
    peak = counts.index(max(counts))
    assert counts[: peak + 1] == sorted(counts[: peak + 1]), f"flapped on the way up: {changes}"
    assert counts[peak:] == sorted(counts[peak:], reverse=True), f"flapped: {changes}"
    # The shrink waited out the down window after the last sample that still wanted more.
    shrunk_at = next(t for t, n in changes if n == 1)
    last_wanting = max(r["t"] for r in rows if r["t"] < shrunk_at and (r["wanted"] or 0) > 1)
    reactions["down_window_held_s"] = round(shrunk_at - last_wanting, 1)
    assert shrunk_at - last_wanting >= DOWN_WINDOW_S - 4, f"shrank inside the window: {changes}"
    seen = [r["capacity"] for r in rows if r.get("capacity")]
    assert seen, "the status never gave a capacity"


def _ramp(timeline: Timeline, url: str, tmp_path: Path, reactions: dict[str, float]) -> None:
    with timeline:
        heavy_started = time.monotonic()
        heavy = start_load(url, "llama", "chat", 75, tmp_path / "heavy.json", concurrency=24)
        try:
            wait_for(lambda: timeline.replicas() > 1, what="the pool to grow", timeout=70)
            reactions["up_s"] = round(time.monotonic() - heavy_started, 1)
        finally:
            load_summary(heavy, tmp_path / "heavy.json")
        light_started = time.monotonic()
        light = start_load(url, "llama", "chat", 60, tmp_path / "light.json", concurrency=1)
        try:
            wait_for(
                lambda: timeline.replicas() == 1,
                what="the pool to shrink back after the down window",
                timeout=DOWN_WINDOW_S + 40,
            )
            reactions["down_s"] = round(time.monotonic() - light_started, 1)
        finally:
            light.terminate()
            light.wait(timeout=30)
