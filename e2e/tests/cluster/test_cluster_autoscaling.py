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

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.autoscale.ramp import DOWN_WINDOW_S, HEAVY_S, MAX_REPLICAS, NAME, run_ramp
from e2e.localcluster import cluster
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from e2e.tests.chart.test_chart_dry_run import THIRD_PARTY, apply_crds
from specdeploy.runtime.kube import paths


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster


@pytest.mark.parametrize("mode", ["operator", "hpa"])
def test_a_load_ramp_grows_the_pool_within_max_and_it_shrinks_after_the_window(
    mode: str, operator: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> None:
    ramp = run_ramp(operator, admin, namespace, mode, tmp_path)
    print(f"\nautoscaling e2e ({mode}): samples in {tmp_path}")

    requests = ramp.requests
    # every request ended: ok, or refused with a retriable status; none failed or hung
    assert requests["failed"] == requests["timed_out"] == 0 and requests["ok"] > 0, requests
    assert max(int(r["replicas"] or 0) for r in ramp.rows) <= MAX_REPLICAS
    changes = ramp.changes()
    counts = [n for _, n in changes]
    assert counts and max(counts) > 1, f"the pool never grew: {changes}"
    peak = counts.index(max(counts))
    assert counts[: peak + 1] == sorted(counts[: peak + 1]), f"flapped on the way up: {changes}"
    assert counts[peak:] == sorted(counts[peak:], reverse=True), f"flapped: {changes}"
    # The shrink waited out the down window after the light stage began (the heavy stage
    # kept wanting more: the flap checks above would have caught a dip that shrank it).
    light_started = ramp.load_started + HEAVY_S
    shrunk_at = next(t for t, n in changes if n == 1)
    reactions = {
        "tpot_target_ms": ramp.tpot_target_ms,
        "grew_after_load_s": round(changes[0][0] - ramp.load_started, 1),
        "shrank_after_light_s": round(shrunk_at - light_started, 1),
    }
    print(f"autoscaling e2e ({mode}) reactions: {reactions}")
    assert shrunk_at - light_started >= DOWN_WINDOW_S - 2, f"shrank inside the window: {changes}"
    switch_scalers(operator, admin, namespace, mode)


def scalers(admin: KubeApi, namespace: str) -> set[str]:
    kinds = ("HorizontalPodAutoscaler", "ScaledObject")
    return {k for k in kinds if admin.items(paths.path(k, namespace))}


def switch_scalers(local: cluster.Cluster, admin: KubeApi, namespace: str, mode: str) -> None:
    """Changing the mode swaps the pool's scaler: the old one is deleted, never left to fight.

    From the ramp's mode through ``hpa``, ``keda`` and ``none``: the per-change tier's
    only requests that create, read, patch and delete HPAs and ScaledObjects, so the
    session's least-privilege check sees those grants used without the nightly ``hpa``
    ramp. KEDA's CRD is installed so the ScaledObject can exist (KEDA itself does not run).
    """
    apply_crds(local.kubeconfig, THIRD_PARTY)
    body = paths.path("SpeculativeDeployment", namespace, NAME)
    assert scalers(admin, namespace) == ({"HorizontalPodAutoscaler"} if mode == "hpa" else set())
    steps: tuple[tuple[str, set[str]], ...] = (
        ("hpa", {"HorizontalPodAutoscaler"}),
        ("keda", {"ScaledObject"}),
        ("none", set()),
    )
    for mode, wanted in steps:
        admin.merge_patch(body, {"spec": {"autoscaling": {"mode": mode}}})

        def swapped(wanted: set[str] = wanted) -> bool:
            return scalers(admin, namespace) == wanted

        wait_for(
            swapped,
            what=f"mode {mode}: the pool's scalers to be {sorted(wanted) or 'none'}",
            timeout=30,
        )
