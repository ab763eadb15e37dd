"""One autoscaling load ramp on the local cluster, shared by the e2e test and the benchmark.

A SpeculativeDeployment with one autoscaled H100 pool (emulated GPU: the loop
test's set-up, so a replica's speed and the capacity the operator computes are
the emulated H100's), its TPOT target sized from the pool's own profile so the
load a 2-core box can generate needs more than one replica; then
``specdeploy load --ramp`` (heavy, then light) through the model's Service,
while ``Timeline`` samples the pool Deployment's replicas and the status's
autoscaling view every second. Mode ``hpa`` runs prometheus-adapter for the
block (``metrics_adapter``). What the run shows is judged by the caller.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.localcluster import cluster, metrics_adapter, service_url
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from e2e.tests.cluster.test_loop import plain_spec
from e2e.time_scale import scaled
from specdeploy.operator.pool.scaling import capacity_of
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
            "unix": round(time.time(), 2),
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
LIGHT_S = 30
RAMP = f"{HEAVY_S}s@24,{LIGHT_S}s@1"
"""Heavy chat load, then light: the pool must grow in the first stage and shrink in the second.

The light stage outlasts the down window (``DOWN_WINDOW_S``) by a telemetry interval or
two; a shrink that comes later still counts, since the ramp then waits for the pool to be
back at one replica."""


def ramp_load(url: str, out: Path, ramp: str = RAMP) -> subprocess.Popen[bytes]:
    """``specdeploy load --ramp`` against the model's Service, its JSON report to ``out``."""
    argv = [sys.executable, "-m", "specdeploy", "load", f"--url={url}", "--model=llama"]
    argv += [f"--ramp={ramp}", "--workload=chat", f"--json={out}", "--max-tokens=64"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def scaler_for(mode: str, local: cluster.Cluster) -> Iterator[None]:
    """Mode hpa needs custom metrics: prometheus-adapter serving the operator's gauge."""
    if mode == "hpa":
        with metrics_adapter.running(local, log=lambda _m: None):
            yield
    else:
        yield


@dataclass(frozen=True)
class Ramp:
    """One ramp's record: the samples, when the load began on their clock, its report."""

    mode: str
    tpot_target_ms: float
    rows: list[Obj]
    load_started: float
    load_json: Path

    @property
    def requests(self) -> Obj:
        summary: Obj = json.loads(self.load_json.read_text())["summary"]
        return dict(summary["requests"])

    def changes(self) -> list[tuple[float, int]]:
        """(sample time, new replica count) at each change of the Deployment's replicas."""
        return [
            (float(b["t"]), int(b["replicas"] or 0))
            for a, b in itertools.pairwise(self.rows)
            if a["replicas"] != b["replicas"]
        ]


def run_ramp(local: cluster.Cluster, admin: KubeApi, namespace: str, mode: str, out: Path) -> Ramp:
    """Create the autoscaled deployment in ``namespace``, ramp the load, sample throughout."""
    with scaler_for(mode, local):
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
        url = service_url.find(local.layout.root, namespace, NAME, wait=60)
        load_json = out / f"ramp-{mode}.json"
        with Timeline(admin, namespace) as timeline:
            load_started = timeline.now()
            load = ramp_load(url, load_json)
            if load.wait(timeout=300) != 0:
                raise AssertionError(f"specdeploy load failed: see {load_json}")
            wait_for(
                lambda: timeline.replicas() == 1, what="the pool back at 1", timeout=scaled(55)
            )
        rows = [r for r in timeline.rows if "error" not in r]
    (out / f"timeline-{mode}.json").write_text(json.dumps(rows))
    return Ramp(mode, target_ms, rows, load_started, load_json)
