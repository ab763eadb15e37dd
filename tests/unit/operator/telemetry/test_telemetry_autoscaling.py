"""The reconcile with telemetry's demand: who writes a pool's replicas in each autoscaling mode."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from specdeploy.operator.builders.scaler import WANTED_REPLICAS_METRIC
from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan_children
from tests.unit.operator.telemetry.fakes import (
    NOW,
    URL,
    body,
    owned,
    pool,
    report,
    settle,
    step,
    window,
    world,
)

pytestmark = pytest.mark.unit


def autoscaled(mode: str, **extra: Any) -> dict[str, Any]:
    doc = body(autoscaling={"mode": mode, "tpotTargetMs": 10, **extra})
    doc["spec"]["pools"][0]["replicas"] = {"min": 1, "max": 8}
    return doc


def busy(tokens_per_s: float) -> Any:
    return report(
        dataclasses.replace(window(), generation_tokens_per_second=tokens_per_s, waiting_requests=0)
    )


def test_operator_mode_writes_the_deployments_replicas_from_demand() -> None:
    deployment, decision = settle(autoscaled("operator"))
    assert owned(decision, "Deployment")["spec"]["replicas"] == 1
    assert not [m for m in decision.owned if m["kind"] == "HorizontalPodAutoscaler"]

    _, after = step(deployment, decision, busy(50_000.0))

    replicas = owned(after, "Deployment")["spec"]["replicas"]
    scaling = pool(after)["autoscaling"]
    assert replicas == scaling["wantedReplicas"] == 8  # 50k tokens/s at 6.9k each, 80%: max
    assert scaling["limitedBy"] == "max"
    assert scaling["scaler"] == "operator"
    assert after.scale and next(iter(after.scale.values())).replicas == replicas


def test_hpa_mode_renders_an_hpa_on_the_operators_metric_and_leaves_replicas_to_it() -> None:
    deployment, decision = settle(autoscaled("hpa", scaleDownWindowSeconds=30))
    _, after = step(deployment, decision, busy(50_000.0))

    served = owned(after, "Deployment")
    hpa = owned(after, "HorizontalPodAutoscaler")
    assert "replicas" not in served["spec"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == served["metadata"]["name"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["object"]["metric"]["name"] == WANTED_REPLICAS_METRIC
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 30
    assert pool(after)["autoscaling"]["wantedReplicas"] > 1
    assert not after.scale  # the HPA stabilises, not the operator


def test_keda_mode_renders_a_scaled_object_with_a_prometheus_trigger() -> None:
    _, decision = settle(autoscaled("keda"))

    scaled = owned(decision, "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["serverAddress"] == URL
    assert WANTED_REPLICAS_METRIC in trigger["metadata"]["query"]
    assert "replicas" not in owned(decision, "Deployment")["spec"]


def test_changing_the_mode_deletes_the_old_scaler() -> None:
    deployment, decision = settle(autoscaled("hpa"))
    assert owned(decision, "HorizontalPodAutoscaler")

    switched = {**deployment, "spec": {**deployment["spec"], "autoscaling": {"mode": "none"}}}
    requests = plan_children(
        switched, decide(switched, world(switched, decision), now=NOW), world(switched, decision)
    )

    deleted = [r.what for r in requests if r.method == "DELETE"]
    assert any("HorizontalPodAutoscaler" in what for what in deleted), deleted
