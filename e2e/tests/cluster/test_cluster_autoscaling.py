"""Autoscaling on the local cluster: load grows a pool within its bounds, quiet shrinks it.

Real: the control plane, the operator and its telemetry loop, Prometheus 3
scraping the serving pods, the add-on in each pod, the gateway in front of the
Service's ready endpoints, ``specdeploy load``. Emulated: the GPUs (the loop
test's set-up, ``test_loop.plain_spec``), so a replica's speed, and with it
the capacity the operator computes, is the emulated H100's.

``mode: operator``: the operator writes the pool Deployment's replicas from
the capacity model. ``mode: hpa``: the operator renders an HPA on its own
``specdeploy_operator_pool_wanted_replicas`` gauge, prometheus-adapter serves
it as a custom metric through the aggregation layer (front-proxy
certificates), and the real HPA controller in kube-controller-manager scales.
The ramp (``specdeploy load --ramp``) is heavy load, then light: the pool must
grow within ``max`` and shrink only after the down window, with one change of
direction; every request the load generator started must end ok or refused
with a retriable status, none failed or hung.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import cluster, metrics_adapter, service_url
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
DOWN_WINDOW_S = 15
TPOT_TARGET_MS = 50.0
"""The spec's first target; the test then sets the one ``sized_target`` picks."""
REPLICA_TOKENS_PER_S = 1500.0
"""One replica's capacity the test sizes for: a 2-core box drives about 6000 tokens/s
through the gateway at concurrency 24 and a few hundred at concurrency 1."""


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster


def phase(admin: KubeApi, namespace: str) -> str | None:
    body = admin.get(paths.path("SpeculativeDeployment", namespace, NAME))
    return (body.get("status") or {}).get("phase")


def scaled_spec(mode: str) -> Obj:
    spec = plain_spec()
    spec["metadata"]["name"] = NAME
    spec["spec"]["pools"] = [{"gpuType": GPU, "replicas": {"min": 1, "max": MAX_REPLICAS}}]
    spec["spec"]["autoscaling"] = {
        "mode": mode,
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


HEAVY_S = 40
RAMP = f"{HEAVY_S}s@24,45s@1"
"""Heavy chat load, then light: the pool must grow in the first stage and shrink in the second."""


def ramp_load(url: str, out: Path) -> subprocess.Popen[bytes]:
    """``specdeploy load --ramp`` against the model's Service, its JSON report to ``out``."""
    argv = [sys.executable, "-m", "specdeploy", "load", f"--url={url}", "--model=llama"]
    argv += [f"--ramp={RAMP}", "--workload=chat", f"--json={out}", "--max-tokens=64"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def scaler_for(mode: str, local: cluster.Cluster) -> Iterator[None]:
    """Mode hpa needs custom metrics: prometheus-adapter serving the operator's gauge."""
    if mode == "hpa":
        with metrics_adapter.running(local, log=lambda _m: None):
            yield
    else:
        yield


@pytest.mark.parametrize("mode", ["operator", "hpa"])
def test_a_load_ramp_grows_the_pool_within_max_and_it_shrinks_after_the_window(
    mode: str, operator: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> None:
    with scaler_for(mode, operator):
        admin.post(paths.path("SpeculativeDeployment", namespace), scaled_spec(mode))
        wait_for(
            lambda: phase(admin, namespace) == "Ready",
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
        with Timeline(admin, namespace) as timeline:
            load_started = timeline.now()
            load = ramp_load(url, tmp_path / "ramp.json")
            assert load.wait(timeout=200) == 0, "specdeploy load failed"
            wait_for(lambda: timeline.replicas() == 1, what="the pool back at 1", timeout=40)
        rows = [r for r in timeline.rows if "error" not in r]
        (tmp_path / "timeline.json").write_text(json.dumps(rows))
    print(f"\nautoscaling e2e ({mode}): timeline {tmp_path / 'timeline.json'}")
    print("samples:", json.dumps(rows[:: max(1, len(rows) // 25)]))
    requests = json.loads((tmp_path / "ramp.json").read_text())["summary"]["requests"]
    # every request ended: ok, or refused with a retriable status; none failed or hung
    assert requests["failed"] == requests["timed_out"] == 0 and requests["ok"] > 0, requests
    assert max(int(r["replicas"] or 0) for r in rows) <= MAX_REPLICAS
    changes = [
        (b["t"], b["replicas"])
        for a, b in itertools.pairwise(rows)
        if a["replicas"] != b["replicas"]
    ]
    counts = [int(n or 0) for _, n in changes]
    assert counts and max(counts) > 1, f"the pool never grew: {changes}"
    peak = counts.index(max(counts))
    assert counts[: peak + 1] == sorted(counts[: peak + 1]), f"flapped on the way up: {changes}"
    assert counts[peak:] == sorted(counts[peak:], reverse=True), f"flapped: {changes}"
    reactions["grew_after_load_s"] = round(changes[0][0] - load_started, 1)
    # The shrink waited out the down window after the light stage began (the heavy stage
    # kept wanting more: the flap checks above would have caught a dip that shrank it).
    light_started = load_started + HEAVY_S
    shrunk_at = next(t for t, n in changes if n == 1)
    reactions["shrank_after_light_s"] = round(shrunk_at - light_started, 1)
    print(f"autoscaling e2e ({mode}) reactions: {reactions}")
    assert shrunk_at - light_started >= DOWN_WINDOW_S - 2, f"shrank inside the window: {changes}"
