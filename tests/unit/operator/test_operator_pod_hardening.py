"""Serving and profiling pods meet Pod Security ``restricted`` (review M8)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.operator.test_operator_builders import job, pod, serving


@pytest.mark.parametrize("which", ["serving", "profiling"])
def test_pods_run_as_non_root_with_no_privileges_and_runtime_default_seccomp(which: str) -> None:
    p: dict[str, Any] = pod(serving() if which == "serving" else job())
    assert p["securityContext"]["runAsNonRoot"] is True
    assert p["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in p["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HF_HOME"].startswith(tuple(mounts)), "the cache is on a volume"


def test_serving_pods_carry_no_service_account_token_and_profiling_pods_do() -> None:
    assert pod(serving())["automountServiceAccountToken"] is False
    assert pod(job()).get("automountServiceAccountToken", True) is True  # it writes the profile


def test_each_pool_has_a_disruption_budget_over_exactly_its_pods() -> None:
    from specdeploy.operator.decide import decide
    from tests.unit.operator.test_operator_reconcile import (
        H100,
        NOW,
        deployment,
        node,
        observed,
        profile,
    )
    from tests.unit.operator.test_operator_reconcile import (
        serving as pool_deployment,
    )

    body = deployment({"pools": [{"gpuType": H100}]})
    decision = decide(
        body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)), now=NOW
    )
    (budget,) = [m for m in decision.owned if m["kind"] == "PodDisruptionBudget"]
    dep = pool_deployment(decision, H100)
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == dep["spec"]["selector"]
    assert (
        budget["metadata"]["ownerReferences"][0]["uid"]
        == dep["metadata"]["ownerReferences"][0]["uid"]
    )
