"""An update that fails validation touches nothing, shared children included (review H3).

Inverted probe: at 7a48b4a an invalid update during profiling kept the
deployment's owned children but left the shared ones, so the planner deleted
the running profiling Job and its RBAC (the last owner leaving); the README
promises that an update failing validation touches nothing.
"""

from __future__ import annotations

from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan_children
from tests.unit.operator.test_operator_reconcile import (
    H100,
    NOW,
    deployment,
    node,
    observed,
    stored,
)


def test_an_invalid_update_mid_profiling_keeps_the_job_and_its_rbac() -> None:
    body = deployment({"pools": [{"gpuType": H100}]})
    first = decide(body, observed(nodes=(node("h1", H100),)), now=NOW)
    assert any(m["kind"] == "Job" for m in first.shared)
    world = observed(*[stored(m) for m in first.shared + first.owned], nodes=(node("h1", H100),))
    assert plan_children(body, decide(body, world, now=NOW), world) == []
    broken = deployment(
        {"pools": [{"gpuType": H100}], "profiling": {"batchSizes": [1, 8, 4]}}, generation=2
    )
    decision = decide(broken, world, now=NOW)
    assert decision.status["conditions"][0]["status"] == "False"  # Valid=False, said so
    assert plan_children(broken, decision, world) == [], "no child written or deleted"
