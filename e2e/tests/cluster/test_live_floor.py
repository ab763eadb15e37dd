"""The live floor on the local cluster: chat, then random text, then chat again.

Issue 31's path end to end: random text collapses acceptance, the live
stage lowers the table, R (the pool's throughput over plain decoding's at
the batch sizes it serves) stays confidently below 1, and the operator rolls
the pool to plain decoding with surge, one canary replica (a Deployment of its
own) speculating; chat traffic returns, the canary's R stays above 1, and the
pool speculates again, the canary gone. No request fails or hangs on the way
and the serving pods never outnumber ``max`` + the rollout's surge + the canary.

Every request of every load must succeed: not one refused, failed or hung.
That holds because a new serving pod is Ready only once its readiness probe
passes (the kubelet stand-in probes it, ``stages.PROBE_PASSED``), so a
rollout with ``maxUnavailable: 0`` keeps the old pod serving until the new one
answers, as on a real cluster.

Real: the control plane, the operator and its telemetry loop, Prometheus,
the add-on in each emulated pod (policy, table watcher, metrics), the load
generator through the cluster's gateway. Emulated: the GPUs (simulator step
costs, ``e2e/emulated``), so R is modelled; the decisions and the objects
are the operator's own. The operator runs with ``--floor-restart-seconds 1``:
an emulated pod starts in about a second, and the default (120 s, a real
model's load) would make the break-even wait longer than this test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import cluster, prometheus, service_url
from e2e.localcluster.fleet_view import children, load_summary, start_load
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import WaitTimeout, wait_for
from e2e.time_scale import scaled
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
NAME = "floor"
GPU = "NVIDIA-H100-80GB-HBM3"
INTERVAL_S = 10
"""The shortest telemetry interval the operator takes (``telemetry.interval.MIN_SECONDS``):
three losing windows, then three canary windows, pace the test."""
LOAD_S = 10
"""Each load runs this long; the test runs loads until the state it waits for."""
CANARY_LABEL = "specdeploy.io/canary"
SURGE = 1
"""The serving Deployments' ``maxSurge``."""


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster, extra_args=["--floor-restart-seconds=1"]):
        yield local_cluster


def spec() -> Obj:
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
            "pools": [{"gpuType": GPU, "replicas": {"min": 1, "max": 1}}],
            "telemetry": {"interval": f"{INTERVAL_S}s"},
        },
    }


def pool_status(admin: KubeApi, namespace: str) -> Obj:
    body: Obj = admin.get(paths.path("SpeculativeDeployment", namespace, NAME))
    pools = (body.get("status") or {}).get("pools") or [{}]
    return dict(pools[0])


def floor_state(admin: KubeApi, namespace: str) -> str | None:
    return (pool_status(admin, namespace).get("floor") or {}).get("state")


def speculates(deployment: Obj) -> bool:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return any("--speculative-config" in str(a) for c in containers for a in c.get("args", []))


def floor_series(prometheus_url: str, namespace: str, state: str) -> list[Obj] | None:
    """R's series (source and bounds) Prometheus holds for the pool, once the operator's
    floor-state series says ``state``; None before."""
    pool = f'specdeploy_namespace="{namespace}", job="specdeploy-operator"'
    states = prometheus.instant_query(
        prometheus_url, f'specdeploy_operator_pool_floor_state{{{pool}, state="{state}"}} == 1'
    )
    ratios = prometheus.instant_query(
        prometheus_url, f'specdeploy_operator_pool_live_ratio{{{pool}, bound="high"}}'
    )
    return ratios if states and ratios else None


def deployments(admin: KubeApi, namespace: str) -> dict[str, Obj]:
    return {d["metadata"]["name"]: d for d in children(admin, "Deployment", namespace)}


class Fleet:
    """The module's deployment under load: every load's summary checked, pods counted."""

    def __init__(self, admin: KubeApi, namespace: str, url: str, folder: Path) -> None:
        self.admin, self.namespace, self.url, self.folder = admin, namespace, url, folder
        self.loads = 0
        self.most_pods = 0
        self.requests = 0
        self.phases: list[str] = []

    def count_pods(self) -> int:
        pods = [
            p
            for p in children(self.admin, "Pod", self.namespace)
            if p["metadata"].get("labels", {}).get("specdeploy.io/component") == "serving"
            and not p["metadata"].get("deletionTimestamp")
        ]
        self.most_pods = max(self.most_pods, len(pods))
        return len(pods)

    def load_until(self, workload: str, reached: Any, *, what: str, timeout: float) -> Any:
        """Run ``workload`` loads back to back until ``reached()`` returns a value."""
        start = time.monotonic()
        deadline = start + timeout
        while time.monotonic() < deadline:
            self.loads += 1
            out = self.folder / f"{workload}-{self.loads}.json"
            running = start_load(self.url, "llama", workload, LOAD_S, out)
            found = None
            try:
                found = wait_for(
                    lambda: (self.count_pods() and reached()) or None,
                    what=what,
                    timeout=LOAD_S,
                    interval=1,
                )
            except WaitTimeout:  # not yet: the next load goes on
                found = None
            summary = load_summary(running, out)
            requests = summary["requests"]
            assert 0 < requests["ok"] == requests["sent"], (
                f"{workload} load {self.loads}: {requests}"
            )
            self.requests += requests["sent"]
            if found:
                self.phases.append(f"{workload} {time.monotonic() - start:.0f} s")
                return found
        pytest.fail(f"no {what} within {timeout:.0f} s of {workload} traffic")


def test_random_text_rolls_the_pool_to_plain_decoding_with_a_canary_and_chat_brings_it_back(
    operator: cluster.Cluster, admin: KubeApi, module_namespace: str, tmp_path: Path
) -> None:
    namespace = module_namespace
    admin.post(paths.path("SpeculativeDeployment", namespace), spec())
    wait_for(
        lambda: (
            pool_status(admin, namespace).get("speculating") is True
            and pool_status(admin, namespace).get("readyReplicas") == 1
        ),
        what="the pool speculating with a ready replica",
        timeout=scaled(240),
    )
    url = service_url.find(operator.layout.root, namespace, NAME, wait=60)
    fleet = Fleet(admin, namespace, url, tmp_path)

    # Chat: R judged above the floor (a window judged, speculation holds).
    held = fleet.load_until(
        "chat",
        lambda: (
            (pool_status(admin, namespace).get("floor") or {}).get("ratio") is not None
            and floor_state(admin, namespace) == "speculating"
            and pool_status(admin, namespace)["floor"]
        ),
        what="a judged window with speculation holding",
        timeout=scaled(120),
    )
    assert held["ratioLow"] > 1.0, held  # the emulated H100 gains under chat

    # Random text: R collapses below plain decoding's; the pool rolls to plain decoding.
    plain = fleet.load_until(
        "random",
        lambda: floor_state(admin, namespace) == "plain" and pool_status(admin, namespace),
        what="the pool rolled to plain decoding",
        timeout=scaled(240),
    )
    floor = plain["floor"]
    assert floor["ratioHigh"] < 0.98 and floor["losingWindows"] >= 3, floor
    assert plain["speculating"] is False and "plain decoding (live floor)" in plain["message"]
    found = deployments(admin, namespace)
    canaries = [d for d in found.values() if d["metadata"]["labels"].get(CANARY_LABEL)]
    (main,) = (d for d in found.values() if not d["metadata"]["labels"].get(CANARY_LABEL))
    assert len(canaries) == 1 and canaries[0]["spec"]["replicas"] == 1
    assert speculates(canaries[0]) and not speculates(main)
    body: Obj = admin.get(paths.path("SpeculativeDeployment", namespace, NAME))
    beneficial = next(
        c for c in body["status"]["conditions"] if c["type"] == "SpeculationBeneficial"
    )
    assert (beneficial["status"], beneficial["reason"]) == ("False", "LiveFloorPlain")
    # The dashboards' view: the operator's series, scraped by Prometheus, say it too.
    scraped = wait_for(
        lambda: floor_series(operator.prometheus_url, namespace, "plain"),
        what="Prometheus to scrape the operator's plain floor state",
        timeout=scaled(30),
        interval=1,
    )
    assert len(scraped) == 1, scraped  # R's upper bound: one series, the pool's or canary's

    # Chat again: the canary's R wins for three windows; the pool speculates again.
    back = fleet.load_until(
        "chat",
        lambda: (
            floor_state(admin, namespace) == "speculating"
            and pool_status(admin, namespace).get("speculating")
            and pool_status(admin, namespace)
        ),
        what="the pool speculating again on the canary's evidence",
        timeout=scaled(300),
    )
    assert "canary" in back["floor"]["reason"] and len(back["floor"]["flips"]) == 2, back
    wait_for(
        lambda: (
            len(deployments(admin, namespace)) == 1
            and speculates(next(iter(deployments(admin, namespace).values())))
        ),
        what="the canary deleted, the pool's Deployment speculating",
        timeout=scaled(60),
    )
    reasons = {
        e.get("reason")
        for e in admin.items(paths.path("Event", namespace))
        if e.get("involvedObject", {}).get("name") == NAME
    }
    assert {"PlainDecoding", "SpeculationResumed"} <= reasons, reasons
    # max 1: the pool's replica, one surged during each rollout, and the canary.
    assert fleet.most_pods <= 1 + SURGE + 1, fleet.most_pods
    print(
        f"\nlive floor e2e: {fleet.loads} loads, {fleet.requests} requests, "
        "all ok; phases: " + ", ".join(fleet.phases)
    )
