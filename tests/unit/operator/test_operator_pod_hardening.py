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
    from specdeploy.operator.decision.decide import decide
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


@pytest.mark.parametrize("which", ["serving", "profiling"])
def test_containers_request_cpu_and_memory_per_gpu_and_limit_memory_by_default(
    which: str,
) -> None:
    """Review M8: the containers asked for GPUs only, so a node's CPU and memory were
    promised to no one and the pods were BestEffort for everything but the GPU."""
    (container,) = pod(serving() if which == "serving" else job())["containers"]
    resources = container["resources"]
    # both builders here run 2 GPUs per replica
    assert resources["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}
    assert resources["limits"] == {"memory": "128Gi", "nvidia.com/gpu": "2"}


def test_the_specs_resources_are_used_as_given_and_the_gpus_stay_the_operators() -> None:
    from tests.unit.operator.test_operator_builders import spec

    given = spec(vllm={"resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "8Gi"}}})
    (container,) = pod(serving(given))["containers"]
    assert container["resources"]["requests"] == {"cpu": "500m", "nvidia.com/gpu": "2"}
    assert container["resources"]["limits"] == {"memory": "8Gi", "nvidia.com/gpu": "2"}


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"requests": {"memory": "64Gi"}, "limits": {"memory": "32Gi"}}, "requests.memory"),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}, "requests.cpu"),
        ({"requests": {"cpu": "1e3"}}, "requests.cpu"),
        ({"limits": {"memory": "-1Gi"}}, "limits.memory"),
    ],
    ids=["memory-request-over-limit", "cpu-request-over-limit", "exponent", "negative"],
)
def test_resources_the_api_server_would_refuse_on_the_pods_are_refused_naming_the_field(
    resources: dict[str, Any], field: str
) -> None:
    import yaml

    from specdeploy.operator.decision.validation import validate
    from tests.unit.operator.test_operator_builders import EXAMPLE

    body = yaml.safe_load(EXAMPLE.read_text())["spec"]
    body["vllm"] = {**body.get("vllm", {}), "resources": resources}
    verdict = validate(body)
    assert verdict.spec is None
    assert any(f"spec.vllm.resources.{field}" in p.message for p in verdict.problems)


def _pool_manifests(changes: dict[str, Any]) -> list[dict[str, Any]]:
    from specdeploy.operator.decision.decide import decide
    from tests.unit.operator.test_operator_reconcile import H100, NOW, deployment, node, observed
    from tests.unit.operator.test_operator_reconcile import profile as stored_profile

    body = deployment({"pools": [{"gpuType": H100}], **changes})
    world = observed(profiles=(stored_profile(body, H100),), nodes=(node("h1", H100),))
    return list(decide(body, world, now=NOW).owned)


def test_no_network_policy_unless_asked_then_one_per_pool_over_its_pods_and_ports() -> None:
    """Review M8: vLLM's API (unauthenticated) and metrics were open to every pod."""
    assert not [m for m in _pool_manifests({}) if m["kind"] == "NetworkPolicy"]
    peers = [{"namespaceSelector": {"kubernetes.io/metadata.name": "gateway"}}]
    owned = _pool_manifests({"networkPolicy": {"enabled": True, "allowFrom": peers}})
    (fence,) = [m for m in owned if m["kind"] == "NetworkPolicy"]
    (dep,) = [m for m in owned if m["kind"] == "Deployment"]
    assert fence["spec"]["podSelector"] == dep["spec"]["selector"]
    assert fence["spec"]["policyTypes"] == ["Ingress"], "egress stays open (model downloads)"
    (rule,) = fence["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": peers[0]["namespaceSelector"]}}]
    assert {p["port"] for p in rule["ports"]} == {8000, 9400}


def test_an_enabled_policy_without_peers_admits_the_namespaces_own_pods() -> None:
    owned = _pool_manifests({"networkPolicy": {"enabled": True}})
    (fence,) = [m for m in owned if m["kind"] == "NetworkPolicy"]
    assert fence["spec"]["ingress"][0]["from"] == [{"podSelector": {}}]


def test_a_peer_naming_no_selector_or_a_bad_label_is_refused_naming_the_field() -> None:
    import yaml

    from specdeploy.operator.decision.validation import validate
    from tests.unit.operator.test_operator_builders import EXAMPLE

    body = yaml.safe_load(EXAMPLE.read_text())["spec"]
    body["networkPolicy"] = {"enabled": True, "allowFrom": [{}, {"podSelector": {"-x": "y"}}]}
    messages = [p.message for p in validate(body).problems]
    assert any("spec.networkPolicy.allowFrom[0]: names neither" in m for m in messages)
    assert any("spec.networkPolicy.allowFrom[1].podSelector" in m for m in messages)
