"""The operator's decision, (spec, observed state) -> children and status, without a cluster."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.common import APPLIED_HASH
from specdeploy.operator.builders.deployment import startup_table
from specdeploy.operator.decision.decide import Decision, decide
from specdeploy.operator.decision.plan import plan, plan_children
from specdeploy.operator.manifests import ref_of
from specdeploy.operator.naming import deployment_name, job_name, table_configmap_name
from specdeploy.operator.observed import Observed
from specdeploy.operator.pool.fingerprint import pool_fingerprint, profile_name
from specdeploy.runtime.ranges import format_schedule, validate_vllm
from tests.paths import ROOT

EXAMPLE = ROOT / "examples" / "specdeploy.yaml"
PROFILE_EXAMPLE = ROOT / "examples" / "profile-example.yaml"
NS, UID, NOW = "inference", "uid-a", "2026-01-01T00:00:00Z"
H100, A100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"


def merged(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def deployment(spec: Mapping[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["spec"] = merged(body["spec"], spec or {})
    body["metadata"].update({"namespace": NS, "uid": UID, "generation": 1, **meta})
    return body


def node(name: str, gpu: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": gpu, **labels}},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}},
    }


NODES = (node("h1", H100), node("h2", H100), node("a1", A100))


def expected_profile(body: Mapping[str, Any], gpu: str, gpus: int = 1) -> str:
    spec = SpeculativeDeploymentSpec.model_validate(body["spec"])
    return profile_name(pool_fingerprint(spec, gpu_type=gpu, gpus_per_replica=gpus))


def profile(body: Mapping[str, Any], gpu: str, *, max_k: int = 5) -> dict[str, Any]:
    """A stored SpeculationProfile for this deployment's pool on ``gpu``."""
    doc: dict[str, Any] = yaml.safe_load(PROFILE_EXAMPLE.read_text())
    spec = SpeculativeDeploymentSpec.model_validate(body["spec"])
    fp = pool_fingerprint(spec, gpu_type=gpu, gpus_per_replica=1)
    doc["spec"]["fingerprint"] = fp.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["spec"]["fingerprint"]["maxK"] = max_k
    doc["metadata"] = {"name": profile_name(fp), "namespace": NS}
    return doc


def stored(
    manifest: Mapping[str, Any], *, owners: tuple[str, ...] = (UID,), rv: str = "1"
) -> dict[str, Any]:
    """A manifest as the API server would return it (owned, with a resourceVersion)."""
    obj = copy.deepcopy(dict(manifest))
    meta = obj["metadata"]
    refs = [r for r in meta.get("ownerReferences", []) if r["uid"] in owners]
    refs += [
        {"kind": "SpeculativeDeployment", "name": f"d-{u}", "uid": u}
        for u in owners
        if u not in {r["uid"] for r in refs}
    ]
    meta.update(ownerReferences=refs, resourceVersion=rv, uid=f"obj-{meta['name']}", generation=1)
    return obj


def observed(
    *objects: Mapping[str, Any],
    nodes: tuple[Mapping[str, Any], ...] = NODES,
    profiles: tuple[dict[str, Any], ...] = (),
    pods: Mapping[str, list[dict[str, Any]]] | None = None,
) -> Observed:
    children: dict[str, dict[str, Mapping[str, Any]]] = {}
    for obj in objects:
        children.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    return Observed(
        nodes=nodes,
        profiles={p["metadata"]["name"]: p for p in profiles},
        children=children,
        job_pods=pods or {},
    )


def kinds(manifests: tuple[Mapping[str, Any], ...]) -> list[tuple[str, str]]:
    return sorted(ref_of(m) for m in manifests)


def pool_status(decision: Decision, gpu: str) -> dict[str, Any]:
    pools: list[dict[str, Any]] = decision.status["pools"]
    return next(p for p in pools if p["gpuType"] == gpu)


def condition(decision: Decision, kind: str) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = decision.status["conditions"]
    return next(c for c in conditions if c["type"] == kind)


def settled(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A Deployment as stored after its rollout finished."""
    obj = stored(manifest)
    replicas = obj["spec"]["replicas"]
    obj["status"] = {
        "observedGeneration": 1,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    }
    return obj


def converged(body: dict[str, Any], world: Observed) -> tuple[Observed, Decision]:
    """Store what the decision wants (rollouts finished), as a cluster would."""
    decision = decide(body, world, now=NOW)
    objects = [settled(m) if m["kind"] == "Deployment" else stored(m) for m in decision.owned]
    objects += [stored(m) for m in decision.shared]
    world = observed(
        *objects, nodes=tuple(world.nodes), profiles=tuple(dict(p) for p in world.profiles.values())
    )
    return world, decision


def serving(decision: Decision, gpu: str) -> dict[str, Any]:
    name = deployment_name(UID and "llama-8b-chat", gpu)
    return next(
        m for m in decision.owned if m["kind"] == "Deployment" and m["metadata"]["name"] == name
    )


# --- profiling -----------------------------------------------------------


def test_creates_one_profiling_job_per_gpu_type_and_no_deployment_before_profiles_exist() -> None:
    body = deployment()
    decision = decide(body, observed(), now=NOW)
    jobs = [m for m in decision.shared if m["kind"] == "Job"]
    assert sorted(
        j["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for j in jobs
    ) == [A100, H100]
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(
        job_name(expected_profile(body, gpu)) for gpu in (A100, H100)
    )
    assert kinds(decision.owned) == [("Service", "llama-8b-chat")]
    assert decision.status["phase"] == "Profiling"
    assert condition(decision, "Profiled")["reason"] == "Profiling"


def test_the_profiling_job_gets_its_own_service_account_role_and_binding() -> None:
    decision = decide(deployment(), observed(), now=NOW)
    assert {ref_of(m) for m in decision.shared if m["kind"] != "Job"} == {
        ("ServiceAccount", "specdeploy-profiler"),
        ("Role", "specdeploy-profiler"),
        ("RoleBinding", "specdeploy-profiler"),
    }


def test_reuses_a_profile_with_a_matching_fingerprint_and_creates_no_job() -> None:
    body = deployment()
    decision = decide(body, observed(profiles=(profile(body, H100), profile(body, A100))), now=NOW)
    assert decision.shared == ()
    assert sorted(m["kind"] for m in decision.owned) == [
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "Deployment",
        "PodDisruptionBudget",
        "PodDisruptionBudget",
        "Service",
    ]
    assert pool_status(decision, H100)["profile"] == expected_profile(body, H100)
    assert pool_status(decision, H100)["profileSource"] == "modelled"


def test_a_second_deployment_with_the_same_fingerprint_joins_the_running_job() -> None:
    first = deployment()
    h100_only = observed(nodes=(node("h1", H100),))
    job = next(m for m in decide(first, h100_only, now=NOW).shared if m["kind"] == "Job")
    running = stored(job, owners=("uid-other",))
    running["status"] = {"active": 1}
    world = observed(running, nodes=(node("h1", H100),))
    second = deployment(name="another", uid=UID)
    requests = plan_children(second, decide(second, world, now=NOW), world)
    job_requests = [r for r in requests if "/jobs" in r.path]
    assert [r.method for r in job_requests] == ["PATCH"], "no second Job, only an owner reference"
    assert job_requests[0].body[-1]["value"]["uid"] == UID


def test_a_job_already_running_for_this_deployment_is_left_alone() -> None:
    body = deployment()
    world, _ = converged(body, observed(nodes=(node("h1", H100),)))
    requests = plan_children(body, decide(body, world, now=NOW), world)
    assert requests == []


def test_a_deterministic_profiler_failure_is_reported_and_not_retried() -> None:
    body = deployment()
    world, _ = converged(body, observed(nodes=(node("h1", H100),)))
    name = job_name(expected_profile(body, H100))
    job = dict(world.children["Job"][name])
    job["status"] = {
        "failed": 1,
        "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}],
    }
    pod = {
        "metadata": {"name": f"{name}-x", "creationTimestamp": "2026-01-01T00:00:01Z"},
        "status": {
            "containerStatuses": [
                {
                    "name": "profiler",
                    "state": {
                        "terminated": {"exitCode": 3, "message": "model not found: meta-llama/x"}
                    },
                }
            ]
        },
    }
    world = observed(
        *[o for k in world.children.values() for o in k.values() if o["metadata"]["name"] != name],
        job,
        pods={name: [pod]},
        nodes=tuple(world.nodes),
    )
    decision = decide(body, world, now=NOW)
    pool = pool_status(decision, H100)
    assert pool["state"] == "Failed"
    assert "model not found: meta-llama/x" in pool["message"]
    assert "not retried" in pool["message"]
    assert condition(decision, "Profiled")["reason"] == "ProfilingFailed"
    assert decision.status["phase"] == "Failed"
    requests = plan_children(body, decision, world)
    assert [r for r in requests if "/jobs" in r.path] == [], (
        "the failed Job is kept, never re-created"
    )


def test_a_finished_job_is_deleted_once_its_profile_is_stored() -> None:
    body = deployment()
    world, _ = converged(body, observed(nodes=(node("h1", H100),)))
    world = observed(
        *[o for k in world.children.values() for o in k.values()],
        nodes=tuple(world.nodes),
        profiles=(profile(body, H100),),
    )
    requests = plan_children(body, decide(body, world, now=NOW), world)
    deleted = sorted(r.path.rsplit("/", 2)[-2] for r in requests if r.method == "DELETE")
    assert deleted == ["jobs", "rolebindings", "roles", "serviceaccounts"]


def test_mode_never_without_a_profile_waits_and_creates_no_job() -> None:
    body = deployment({"profiling": {"mode": "never"}})
    decision = decide(body, observed(), now=NOW)
    assert decision.shared == ()
    assert pool_status(decision, H100)["state"] == "Pending"
    assert "spec.profiling.mode is never" in pool_status(decision, H100)["message"]
    assert condition(decision, "Profiled")["reason"] == "ProfileMissing"


def test_mode_always_profiles_even_when_a_matching_profile_exists() -> None:
    body = deployment({"profiling": {"mode": "always"}})
    decision = decide(
        body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)), now=NOW
    )
    assert [m["kind"] for m in decision.shared if m["kind"] == "Job"] == ["Job"]
    assert decision.status["phase"] == "Profiling"


@pytest.mark.parametrize(
    ("policy", "expected_k"), [("fixed", [[1, 1, 2]]), ("off", None)], ids=["fixed", "off"]
)
def test_policies_fixed_and_off_serve_without_profiling(
    policy: str, expected_k: list[list[int]] | None
) -> None:
    """fixed: the start-up K set in the pod, K=2 in the table ConfigMap; off: plain vLLM."""
    body = deployment({"speculation": {"policy": policy, "fixedK": 2}})
    decision = decide(body, observed(nodes=(node("h1", H100),)), now=NOW)
    assert decision.shared == ()
    args = serving(decision, H100)["spec"]["template"]["spec"]["containers"][0]["args"]
    config = [a for a in args if a.startswith("--speculative-config=")]
    if expected_k is None:
        assert config == []
    else:
        parsed = json.loads(config[0].split("=", 1)[1])
        assert parsed["num_speculative_tokens_per_batch_size"] == startup_table(5)
        cm = next(m for m in decision.owned if m["kind"] == "ConfigMap")
        assert json.loads(cm["data"]["table.json"])["schedule"] == expected_k


# --- serving -------------------------------------------------------------


def test_the_status_gives_the_models_in_cluster_endpoint() -> None:
    body = deployment()
    decision = decide(body, observed(nodes=(node("h1", H100),)), now=NOW)
    service = next(m for m in decision.owned if m["kind"] == "Service")
    name = service["metadata"]["name"]
    assert decision.status["endpoint"] == f"http://{name}.{NS}.svc:8000"


def test_a_pool_with_its_profile_gets_a_table_configmap_and_a_deployment_vllm_accepts() -> None:
    body = deployment()
    decision = decide(
        body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)), now=NOW
    )
    container = serving(decision, H100)["spec"]["template"]["spec"]["containers"][0]
    config = json.loads(
        next(a for a in container["args"] if a.startswith("--speculative-config=")).split("=", 1)[1]
    )
    assert config["num_speculative_tokens"] == 5
    assert config["num_speculative_tokens_per_batch_size"] == startup_table(5)
    cm = next(m for m in decision.owned if m["kind"] == "ConfigMap")
    table = json.loads(cm["data"]["table.json"])
    assert validate_vllm(table["schedule"])
    assert format_schedule(table["schedule"]) == pool_status(decision, H100)["schedule"]
    assert pool_status(decision, H100)["schedule"].startswith("1-")
    assert decision.status["phase"] == "RollingOut"


def test_status_is_ready_once_every_pool_has_rolled_out() -> None:
    body = deployment()
    world = observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),))
    world, _ = converged(body, world)
    decision = decide(body, world, now=NOW)
    assert decision.status["phase"] == "Ready"
    assert condition(decision, "Available")["status"] == "True"
    assert condition(decision, "Progressing")["reason"] == "Complete"
    assert decision.status["readyReplicas"] == 1


def test_a_rollout_past_its_progress_deadline_degrades_the_pool() -> None:
    body = deployment()
    world, _ = converged(body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)))
    dep = dict(world.children["Deployment"][deployment_name("llama-8b-chat", H100)])
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 0,
        "conditions": [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "took too long",
            }
        ],
    }
    world = observed(
        *[o for k in world.children.values() for o in k.values() if o["kind"] != "Deployment"],
        dep,
        nodes=tuple(world.nodes),
        profiles=tuple(dict(p) for p in world.profiles.values()),
    )
    decision = decide(body, world, now=NOW)
    assert pool_status(decision, H100)["state"] == "Degraded"
    assert "took too long" in pool_status(decision, H100)["message"]


def test_changing_the_image_rolls_out_without_reprofiling() -> None:
    body = deployment()
    world, _ = converged(body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)))
    changed = deployment({"vllm": {"image": "registry.local/vllm-openai:v0.32.0"}}, generation=2)
    decision = decide(changed, world, now=NOW)
    requests = plan_children(changed, decision, world)
    assert [r.what for r in requests] == [
        f"apply Deployment {deployment_name('llama-8b-chat', H100)}"
    ]
    assert decision.shared == ()
    assert pool_status(decision, H100)["state"] == "RollingOut"


def test_changing_max_k_reprofiles_while_the_previous_deployment_keeps_serving() -> None:
    body = deployment()
    world, _ = converged(body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)))
    changed = deployment({"speculation": {"maxK": 3}}, generation=2)
    decision = decide(changed, world, now=NOW)
    requests = plan_children(changed, decision, world)
    new_job = job_name(expected_profile(changed, H100))
    assert any(r.method == "POST" and r.body["metadata"]["name"] == new_job for r in requests)
    assert not any(r.method in ("DELETE", "PATCH") and "deployments" in r.path for r in requests)
    pool = pool_status(decision, H100)
    assert pool["state"] == "Profiling"
    assert "previous table keeps serving" in pool["message"]
    assert pool["readyReplicas"] == 1


def test_a_removed_pool_loses_its_children() -> None:
    body = deployment({"pools": [{"gpuType": H100}, {"gpuType": A100}]})
    profiles = (profile(body, H100), profile(body, A100))
    world, _ = converged(body, observed(profiles=profiles))
    fewer = deployment({"pools": [{"gpuType": H100}]}, generation=2)
    requests = plan_children(fewer, decide(fewer, world, now=NOW), world)
    deleted = sorted(tuple(r.path.rsplit("/", 2)[-2:]) for r in requests if r.method == "DELETE")
    assert deleted == sorted(
        [
            ("deployments", deployment_name("llama-8b-chat", A100)),
            ("configmaps", table_configmap_name("llama-8b-chat", A100)),
            # the pool's budget too: it was left behind until the deployment itself went
            ("poddisruptionbudgets", deployment_name("llama-8b-chat", A100)),
        ]
    )


def test_an_object_of_someone_else_with_a_childs_name_is_not_overwritten() -> None:
    body = deployment()
    world = observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),))
    intruder = stored(
        next(m for m in decide(body, world, now=NOW).owned if m["kind"] == "Deployment"),
        owners=("uid-x",),
    )
    world = observed(intruder, profiles=(profile(body, H100),), nodes=(node("h1", H100),))
    decision = decide(body, world, now=NOW)
    assert "does not belong to this SpeculativeDeployment" in pool_status(decision, H100)["message"]
    assert not any(
        r.method == "DELETE" or "deployments" in r.path
        for r in plan_children(body, decision, world)
    )


def test_a_profile_whose_schedule_exceeds_max_k_is_never_served() -> None:
    body = deployment()
    bad = profile(body, H100)
    bad["spec"]["schedule"] = [[1, 16, 7], [17, 256, 0]]  # K above the fingerprint's maxK
    decision = decide(body, observed(profiles=(bad,), nodes=(node("h1", H100),)), now=NOW)
    assert not any(m["kind"] == "Deployment" for m in decision.owned)
    assert pool_status(decision, H100)["state"] == "Failed"
    assert "maxK=5" in pool_status(decision, H100)["message"]


# --- discovery and pools -------------------------------------------------


def test_discovery_honours_the_node_selector() -> None:
    body = deployment({"nodeSelector": {"pool": "inference"}})
    nodes = (node("h1", H100, pool="inference"), node("a1", A100, pool="training"))
    decision = decide(body, observed(nodes=nodes), now=NOW)
    assert [p["gpuType"] for p in decision.status["pools"]] == [H100]
    job = next(m for m in decision.shared if m["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "pool": "inference",
        "nvidia.com/gpu.product": H100,
    }


def test_no_gpu_nodes_means_no_pools_and_a_pending_phase() -> None:
    decision = decide(deployment(), observed(nodes=()), now=NOW)
    assert decision.status["pools"] == []
    assert decision.status["phase"] == "Pending"
    assert condition(decision, "Available")["reason"] == "NoPools"


def test_a_pool_too_big_for_every_node_of_its_type_fails_without_children() -> None:
    body = deployment({"pools": [{"gpuType": L40S, "gpusPerReplica": 8}]})
    decision = decide(body, observed(nodes=(node("l1", L40S, gpus=4),)), now=NOW)
    assert decision.shared == ()
    assert "at most 4 GPUs" in pool_status(decision, L40S)["message"]


def test_an_explicit_pool_without_nodes_still_profiles_for_a_cluster_autoscaler() -> None:
    body = deployment({"pools": [{"gpuType": L40S}]})
    decision = decide(body, observed(nodes=()), now=NOW)
    assert [m["kind"] for m in decision.shared if m["kind"] == "Job"] == ["Job"]


# --- validation and status ------------------------------------------------


def test_an_invalid_spec_gets_valid_false_an_event_and_no_children() -> None:
    body = deployment({"speculation": {"fixedK": 9}})
    world = observed()
    decision = decide(body, world, now=NOW)
    assert decision.owned == () and decision.shared == ()
    valid = condition(decision, "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "FixedKExceedsMaxK")
    assert "spec.speculation.fixedK" in valid["message"]
    assert decision.status["phase"] == "Failed"
    assert [e.reason for e in decision.events][:1] == ["FixedKExceedsMaxK"]
    assert [r.method for r in plan(body, decision, world, now=NOW)] == ["PATCH", "POST", "POST"]


def test_an_update_that_turns_invalid_keeps_what_serves() -> None:
    body = deployment()
    world, _ = converged(body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)))
    broken = deployment({"speculation": {"fixedK": 9}}, generation=2)
    assert plan_children(broken, decide(broken, world, now=NOW), world) == []


def test_a_reconcile_with_nothing_new_writes_nothing() -> None:
    body = deployment()
    world, _ = converged(body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)))
    body["status"] = decide(body, world, now=NOW).status
    later = decide(body, world, now="2026-01-02T00:00:00Z")
    assert plan(body, later, world, now="2026-01-02T00:00:00Z") == []


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    body = deployment()
    first = decide(body, observed(), now=NOW)
    body["status"] = first.status
    again = decide(body, observed(), now="2026-02-02T00:00:00Z")
    assert condition(again, "Profiled")["lastTransitionTime"] == NOW


def test_every_transition_is_an_event_and_a_repeat_is_not() -> None:
    body = deployment()
    first = decide(body, observed(nodes=(node("h1", H100),)), now=NOW)
    assert [e.reason for e in first.events] == ["Profiling", "PoolProfiling"]
    body["status"] = first.status
    assert decide(body, observed(nodes=(node("h1", H100),)), now=NOW).events == ()


def test_owned_children_carry_the_hash_of_what_was_applied() -> None:
    decision = decide(deployment(), observed(profiles=(), nodes=()), now=NOW)
    assert all(APPLIED_HASH in m["metadata"]["annotations"] for m in decision.owned)


# --- the plain-decoding floor --------------------------------------------------


def with_baseline(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    """The profile with a plain-decoding baseline at ``factor`` x its K=0 step time."""
    doc = copy.deepcopy(doc)
    doc["spec"]["baseline"] = [
        {"batchSize": m["batchSize"], "itlMs": round(m["itlMs"] * factor, 4), "samples": 64}
        for m in doc["spec"]["measurements"]
        if m["k"] == 0
    ]
    return doc


def speculative_args(decision: Decision, gpu: str) -> list[str]:
    args = serving(decision, gpu)["spec"]["template"]["spec"]["containers"][0]["args"]
    return [a for a in args if a.startswith(("--speculative-config", "--scheduler-cls"))]


def test_a_pool_where_speculation_beats_plain_decoding_reports_its_gain() -> None:
    body = deployment({"pools": [{"gpuType": H100}]})
    world = observed(profiles=(with_baseline(profile(body, H100), 0.9),))
    decision = decide(body, world, now=NOW)
    status = pool_status(decision, H100)
    assert status["speculating"] is True and status["predictedGain"] > 1.0
    assert condition(decision, "SpeculationBeneficial")["status"] == "True"
    assert len(speculative_args(decision, H100)) == 2


def test_a_pool_whose_profile_loses_to_plain_decoding_falls_back_and_says_so() -> None:
    body = deployment({"pools": [{"gpuType": H100}]})
    losing = profile(body, H100)
    losing["spec"]["acceptance"]["perPosition"] = [0.01] * 5  # nothing is ever accepted
    world = observed(profiles=(with_baseline(losing, 0.9),))
    decision = decide(body, world, now=NOW)
    status = pool_status(decision, H100)
    assert status["speculating"] is False and status["predictedGain"] < 1.0
    assert "plain decoding" in status["message"]
    cond = condition(decision, "SpeculationBeneficial")
    assert (cond["status"], cond["reason"]) == ("False", "SpeculationLoses")
    assert speculative_args(decision, H100) == []  # a Deployment without speculation
    table = json.loads(
        next(m for m in decision.owned if m["kind"] == "ConfigMap")["data"]["table.json"]
    )
    assert table["policy"] == "off"
    # fallback: none keeps speculating and still says it loses.
    keep = deployment({"pools": [{"gpuType": H100}], "speculation": {"fallback": "none"}})
    kept = decide(keep, world, now=NOW)
    assert pool_status(kept, H100)["speculating"] is True
    assert condition(kept, "SpeculationBeneficial")["status"] == "False"


def test_without_a_baseline_nothing_claims_a_gain() -> None:
    body = deployment({"pools": [{"gpuType": H100}]})
    decision = decide(body, observed(profiles=(profile(body, H100),)), now=NOW)
    assert "predictedGain" not in pool_status(decision, H100)
    cond = condition(decision, "SpeculationBeneficial")
    assert (cond["status"], cond["reason"]) == ("Unknown", "NoBaseline")
