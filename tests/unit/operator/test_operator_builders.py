"""The manifests the operator builds: profiling Job and its RBAC, vLLM Deployment, Service."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import yaml

from specdeploy.operator.api import GROUP, SpeculativeDeploymentSpec
from specdeploy.operator.builders.common import Parent
from specdeploy.operator.builders.deployment import (
    ServingPool,
    serving_deployment,
    shutdown_timeout,
    startup_table,
)
from specdeploy.operator.builders.job import ProfilingJob, profiling_job
from specdeploy.operator.builders.rbac import (
    operator_cluster_role,
    profiler_role,
    profiler_role_binding,
)
from specdeploy.operator.builders.service import model_service
from specdeploy.operator.pool.fingerprint import pool_fingerprint, profile_name
from specdeploy.runtime.contract import SCHEDULER_CLS
from specdeploy.runtime.profiler.exit_codes import DETERMINISTIC, ExitCode
from specdeploy.runtime.ranges import validate_vllm
from tests.paths import EXAMPLES

EXAMPLE = EXAMPLES / "specdeploy.yaml"
H100 = "NVIDIA-H100-80GB-HBM3"
PARENT = Parent(name="llama", namespace="inference", uid="uid-1")
SCHEDULE = ((1, 16, 5), (17, 64, 3), (65, 256, 0))


def spec(**changes: Any) -> SpeculativeDeploymentSpec:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    for section, values in changes.items():
        data[section] = {**data.get(section, {}), **values}
    return SpeculativeDeploymentSpec.model_validate(data)


def job(s: SpeculativeDeploymentSpec | None = None) -> dict[str, Any]:
    s = s or spec()
    fp = pool_fingerprint(s, gpu_type=H100, gpus_per_replica=2)
    planned = ProfilingJob("profile-x", profile_name(fp), fp, "inference", "img:1")
    return profiling_job(s, planned)


def pod(manifest: dict[str, Any]) -> dict[str, Any]:
    pod_spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod_spec


def serving(s: SpeculativeDeploymentSpec | None = None, schedule: Any = SCHEDULE) -> dict[str, Any]:
    pool = ServingPool("llama-h100", "llama-h100-table", H100, 2, 3, "p-1", schedule)
    return serving_deployment(PARENT, s or spec(), pool)


def args_of(manifest: dict[str, Any]) -> dict[str, str]:
    args = pod(manifest)["containers"][0]["args"]
    return dict(a.partition("=")[::2] for a in args if a.startswith("--"))


# --- the profiling Job -------------------------------------------------------


def test_the_profiling_job_is_pinned_to_its_gpu_type_and_gpu_count() -> None:
    p = pod(job(spec(nodeSelector={"zone": "a"})))
    assert p["nodeSelector"] == {"zone": "a", "nvidia.com/gpu.product": H100}
    assert p["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_the_profiling_job_runs_as_the_profiler_service_account() -> None:
    assert pod(job())["serviceAccountName"] == "specdeploy-profiler"


def test_the_profiling_job_bounds_retries_and_time() -> None:
    s = job(spec(profiling={"backoffLimit": 1, "activeDeadlineSeconds": 900}))["spec"]
    assert (s["backoffLimit"], s["activeDeadlineSeconds"]) == (1, 900)
    assert pod(job())["restartPolicy"] == "Never"


def test_deterministic_exit_codes_fail_the_job_at_once() -> None:
    rules = job()["spec"]["podFailurePolicy"]["rules"]
    fail = next(r for r in rules if r["action"] == "FailJob")
    assert set(fail["onExitCodes"]["values"]) == {int(c) for c in DETERMINISTIC}
    assert int(ExitCode.TRANSIENT) not in fail["onExitCodes"]["values"]
    assert fail["onExitCodes"]["containerName"] == pod(job())["containers"][0]["name"]


def test_disruptions_do_not_count_against_the_backoff_limit() -> None:
    rules = job()["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules


def test_the_profiler_is_told_where_to_write_the_profile() -> None:
    m = job()
    env = {e["name"]: e for e in pod(m)["containers"][0]["env"]}
    assert (
        env["SPECDEPLOY_PROFILE_NAME"]["value"] == m["metadata"]["labels"]["specdeploy.io/profile"]
    )
    assert (
        env["SPECDEPLOY_PROFILE_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.namespace"
    )


def test_the_sim_profiler_models_the_preset_up_to_max_k() -> None:
    flags = args_of(job(spec(profiling={"backend": "sim", "simPreset": "llama8b-eagle3-h200"})))
    assert (flags["--backend"], flags["--preset"], flags["--max-k"]) == (
        "sim",
        "llama8b-eagle3-h200",
        "5",
    )


def test_the_vllm_profiler_gets_the_fingerprint_as_flags() -> None:
    flags = args_of(job())  # the example: the default backend
    assert flags["--backend"] == "vllm"
    assert flags["--tensor-parallel-size"] == "2"
    assert flags["--gpu-type"] == H100
    assert flags["--draft-model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_profiling_and_serving_pods_carry_the_specs_annotations() -> None:
    s = spec(
        profiling={"podAnnotations": {"sidecar.istio.io/inject": "false"}},
        vllm={"podAnnotations": {"team": "llm"}},
    )
    assert job(s)["spec"]["template"]["metadata"]["annotations"] == {
        "sidecar.istio.io/inject": "false"
    }
    assert serving(s)["spec"]["template"]["metadata"]["annotations"]["team"] == "llm"


def test_the_hf_token_comes_from_the_named_secret() -> None:
    s = spec(model={"tokenSecretRef": {"name": "hf", "key": "tok"}})
    env = {e["name"]: e for e in pod(job(s))["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "tok"}


# --- RBAC ----------------------------------------------------------------------


def test_the_profiler_may_only_write_speculation_profiles() -> None:
    role = profiler_role("inference")
    assert role["rules"] == [
        {
            "apiGroups": ["specdeploy.io"],
            "resources": ["speculationprofiles"],
            "verbs": ["create", "get", "update", "patch"],
        }
    ]
    assert role["metadata"]["namespace"] == "inference"


def test_the_binding_names_the_profiler_account_in_its_namespace() -> None:
    binding = profiler_role_binding("inference")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "specdeploy-profiler", "namespace": "inference"}
    ]
    assert binding["roleRef"]["kind"] == "Role"


def test_the_operator_holds_every_permission_it_grants() -> None:
    granted = profiler_role("x")["rules"][0]
    held = [
        r
        for r in operator_cluster_role()["rules"]
        if r["apiGroups"] == granted["apiGroups"] and r["resources"] == granted["resources"]
    ]
    assert any(set(granted["verbs"]) <= set(r["verbs"]) for r in held)


def test_the_operator_is_granted_no_update_since_it_never_puts_and_no_namespace_reads() -> None:
    """Least privilege (issue 15): the audit log of the e2e suite showed these never used."""
    rules = operator_cluster_role()["rules"]
    children = [r for r in rules if "/" not in r["resources"][0] and r["apiGroups"] != [GROUP]]
    # The one PUT is the leader election's renewal, of its one named Lease.
    updates = [r for r in children if "update" in r["verbs"]]
    assert updates == [r for r in updates if r.get("resourceNames") == ["specdeploy-operator"]]
    assert [r["resources"] for r in updates] == [["leases"]]
    assert not any("namespaces" in r["resources"] for r in rules)
    assert not any("secrets" in r["resources"] for r in rules)


def test_the_namespaced_mode_grants_namespaced_kinds_by_a_role_and_cluster_reads_only() -> None:
    from specdeploy.operator.builders.rbac import operator_namespaced_roles

    role, cluster_reads = operator_namespaced_roles("inference")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "inference"
    assert not any("nodes" in r["resources"] for r in role["rules"])
    assert cluster_reads["kind"] == "ClusterRole"
    assert {v for r in cluster_reads["rules"] for v in r["verbs"]} == {"list", "watch"}
    whole = {
        (g, res, v)
        for r in operator_cluster_role()["rules"]
        for g in r["apiGroups"]
        for res in r["resources"]
        for v in r["verbs"]
    }
    split = {
        (g, res, v)
        for doc in (role, cluster_reads)
        for r in doc["rules"]
        for g in r["apiGroups"]
        for res in r["resources"]
        for v in r["verbs"]
    }
    crds = ("apiextensions.k8s.io", "customresourcedefinitions")
    assert split == {g for g in whole if g[:2] != crds}, "all but kopf's CRD scan"


# --- the vLLM Deployment ------------------------------------------------------------


def test_vllm_starts_with_max_k_and_a_table_naming_every_k_of_its_k_set() -> None:
    config = json.loads(args_of(serving())["--speculative-config"])
    assert config["num_speculative_tokens"] == 5
    assert config["method"] == "eagle3"
    assert config["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    table = validate_vllm(config["num_speculative_tokens_per_batch_size"])
    assert [k for _, _, k in table] == [5, 4, 3, 2, 1, 0]
    assert table[0][:2] == (1, 1) and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(table))


@pytest.mark.parametrize("max_k", [1, 2, 3, 7])
def test_the_startup_table_is_one_vllm_accepts_with_every_k_once(max_k: int) -> None:
    table = startup_table(max_k)
    assert validate_vllm(table) == [tuple(r) for r in table]
    assert sorted(k for _, _, k in table) == list(range(max_k + 1))


def test_a_new_schedule_changes_the_table_configmap_but_not_the_pod_template() -> None:
    """The schedule in force lives in the ConfigMap the add-on re-reads; the pod
    template depends on the spec alone, so a new table restarts no pod."""
    before = serving(schedule=SCHEDULE)["spec"]["template"]
    after = serving(schedule=((1, 2, 1), (3, 256, 0)))["spec"]["template"]
    assert before == after


def test_vllm_loads_the_scheduler_add_on() -> None:
    assert args_of(serving())["--scheduler-cls"] == SCHEDULER_CLS


def test_no_speculation_means_no_speculative_config_and_no_add_on() -> None:
    flags = args_of(serving(schedule=None))
    assert "--speculative-config" not in flags and "--scheduler-cls" not in flags
    env = {e["name"] for e in pod(serving(schedule=None))["containers"][0]["env"]}
    assert "SPECDEPLOY_ALLOWED_K" not in env


def test_the_add_on_may_use_every_k_of_0_to_max_k_whatever_the_table_in_force() -> None:
    """The add-on keeps K inside the started K set; without 0 there a collapse of
    acceptance would leave the pod at its smallest K for good, and without the
    larger K a re-derived table could not raise K without a restart."""
    schedule = ((1, 4, 3), (5, 16, 2), (17, 64, 1))
    env = {e["name"]: e for e in pod(serving(schedule=schedule))["containers"][0]["env"]}
    assert env["SPECDEPLOY_ALLOWED_K"]["value"] == "0,1,2,3,4,5"


def test_extra_args_come_last() -> None:
    assert pod(serving())["containers"][0]["args"][-1] == "--max-model-len=8192"


def test_the_deployment_drains_gracefully() -> None:
    s = spec(vllm={"preStopSeconds": 15, "terminationGracePeriodSeconds": 60})
    p = pod(serving(s))
    assert p["terminationGracePeriodSeconds"] == 60
    assert p["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]
    assert args_of(serving(s))["--shutdown-timeout"] == str(shutdown_timeout(s)) == "40"
    strategy = serving(s)["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0


def test_with_autoscaling_the_grace_covers_the_longest_expected_request() -> None:
    # 2048 tokens at 50 ms = 103 s of decoding; + 15 s preStop + 5 s margin = 123 s.
    auto = {"mode": "operator", "tpotTargetMs": 50, "maxOutputTokens": 2048}
    s = spec(vllm={"preStopSeconds": 15}, autoscaling=auto)
    assert pod(serving(s))["terminationGracePeriodSeconds"] == 123
    assert args_of(serving(s))["--shutdown-timeout"] == "103"
    assert pod(serving(spec()))["terminationGracePeriodSeconds"] == 60  # no autoscaling
    explicit = spec(vllm={"terminationGracePeriodSeconds": 30}, autoscaling=auto)
    assert pod(serving(explicit))["terminationGracePeriodSeconds"] == 30  # the user's word


def test_the_deployment_is_pinned_to_its_gpu_type_with_gpu_resources() -> None:
    p = pod(serving())
    assert p["nodeSelector"]["nvidia.com/gpu.product"] == H100
    assert p["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert args_of(serving())["--tensor-parallel-size"] == "2"


def test_the_deployment_mounts_its_table_and_exposes_metrics() -> None:
    p = pod(serving())
    assert {"name": "table", "configMap": {"name": "llama-h100-table"}} in p["volumes"]
    ports = {port["name"]: port["containerPort"] for port in p["containers"][0]["ports"]}
    assert set(ports) == {"http", "metrics"}


@pytest.mark.parametrize("probe", ["startupProbe", "readinessProbe", "livenessProbe"])
def test_the_deployment_probes_vllm_health(probe: str) -> None:
    assert pod(serving())["containers"][0][probe]["httpGet"]["path"] == "/health"


def test_every_child_is_owned_by_its_deployment() -> None:
    for manifest in (serving(), model_service(PARENT, name="llama")):
        (ref,) = manifest["metadata"]["ownerReferences"]
        assert (ref["uid"], ref["controller"]) == ("uid-1", True)


def test_the_service_selects_the_serving_pods_of_every_pool() -> None:
    selector = model_service(PARENT, name="llama")["spec"]["selector"]
    labels = serving()["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert "specdeploy.io/pool" not in selector
