"""The profiling Job of one fingerprint: ``specdeploy profile`` on one GPU type.

The pod runs on a node of the pool's GPU type with the pool's GPU count, as
the profiling ServiceAccount (it may only write SpeculationProfiles), and
writes the profile named after the fingerprint into its own namespace.

Failures: transient ones are retried up to ``backoffLimit``; the profiler's
deterministic exit codes (``runtime.profiler.exit_codes``) fail the Job at
once through ``podFailurePolicy`` (a missing model fails the same way on
every retry, and each retry costs GPU time); a pod evicted or preempted
(``DisruptionTarget``) does not count against the limit.
``activeDeadlineSeconds`` bounds the whole Job, pending time included.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.operator.api import (
    GPU_PRODUCT_LABEL,
    ProfilerBackend,
    SpeculativeDeploymentSpec,
)
from specdeploy.operator.builders.common import (
    COMPONENT_LABEL,
    MANAGED_BY,
    POOL_LABEL,
    PROFILE_LABEL,
    PROFILING,
    Manifest,
)
from specdeploy.operator.builders.pod import (
    CACHE_MOUNT,
    CACHE_VOLUME,
    cache_env,
    container_resources,
    container_security,
    hf_token_env,
    pod_security,
    scheduling,
)
from specdeploy.operator.naming import PROFILER_ACCOUNT, label_value
from specdeploy.runtime.profile import Fingerprint
from specdeploy.runtime.profiler.job_contract import (
    DETERMINISTIC_EXIT_CODES,
    ENV_FINGERPRINT,
    ENV_NAME,
    ENV_NAMESPACE,
    ENV_SA_DIR,
    PROFILER_CONTAINER,
    SERVICEACCOUNT_DIR,
)

DEFAULT_IMAGE = "ghcr.io/specdeploy/specdeploy-runtime:0.1.0"
"""The profiler runs in the serving image (images/runtime.Dockerfile), datasets included."""
FINGERPRINT_ANNOTATION = "specdeploy.io/fingerprint"


@dataclass(frozen=True)
class ProfilingJob:
    """What one profiling Job is for: the profile it writes and how it is pinned."""

    job_name: str
    profile_name: str
    fingerprint: Fingerprint
    namespace: str
    image: str


def profiler_args(spec: SpeculativeDeploymentSpec, fp: Fingerprint) -> list[str]:
    """``specdeploy profile`` flags (specdeploy/cli/profile.py), writing through the API.

    ``sim`` models a preset's model and draft on the pool's GPU type; ``vllm`` starts the
    fingerprint's engine on this pod's GPUs and measures it.
    """
    profiling = spec.profiling
    args = [
        "profile",
        f"--backend={profiling.backend.value}",
        f"--max-k={fp.max_k}",
        "--batch-sizes=" + ",".join(str(b) for b in profiling.batch_sizes),
        "--kubernetes",
    ]
    if profiling.backend is ProfilerBackend.SIM:
        # the preset's model and draft, modelled on this pool's GPU type
        return [*args, f"--preset={profiling.sim_preset}", f"--gpu-type={fp.gpu_type}"]
    args += [
        f"--model={fp.model}",
        f"--model-revision={fp.model_revision}",
        f"--method={fp.method}",
        f"--gpu-type={fp.gpu_type}",
        f"--tensor-parallel-size={fp.gpus_per_replica}",
        f"--dtype={fp.dtype}",
        f"--dataset={profiling.dataset}",
    ]
    if fp.draft_model is not None:
        args.append(f"--draft-model={fp.draft_model}")
    if fp.draft_revision is not None:
        args.append(f"--draft-revision={fp.draft_revision}")
    return args


def pod_failure_policy() -> dict[str, object]:
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": PROFILER_CONTAINER,
                    "operator": "In",
                    "values": list(DETERMINISTIC_EXIT_CODES),
                },
            },
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]
    }


def job_labels(job: ProfilingJob) -> dict[str, str]:
    """Labels of the Job and its pods (shared: no deployment label)."""
    return {
        MANAGED_BY[0]: MANAGED_BY[1],
        COMPONENT_LABEL: PROFILING,
        PROFILE_LABEL: job.profile_name,
        POOL_LABEL: label_value(job.fingerprint.gpu_type),
    }


def _container(spec: SpeculativeDeploymentSpec, job: ProfilingJob) -> dict[str, object]:
    env: list[dict[str, object]] = [
        {"name": ENV_NAMESPACE, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": ENV_NAME, "value": job.profile_name},
        {
            "name": ENV_FINGERPRINT,
            "value": job.fingerprint.model_dump_json(by_alias=True, exclude_none=True),
        },
        # The standard path, named explicitly: where a kubelet stand-in runs the pod
        # locally it rewrites mount paths in env values to the local copies.
        {"name": ENV_SA_DIR, "value": str(SERVICEACCOUNT_DIR)},
        *cache_env(),
        *hf_token_env(spec),
    ]
    return {
        "name": PROFILER_CONTAINER,
        "image": job.image,
        "command": ["specdeploy"],
        "args": profiler_args(spec, job.fingerprint),
        "env": env,
        "resources": container_resources(spec, job.fingerprint.gpus_per_replica),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [CACHE_MOUNT],
        "securityContext": container_security(),
    }


def _pod_metadata(spec: SpeculativeDeploymentSpec, labels: dict[str, str]) -> dict[str, object]:
    meta: dict[str, object] = {"labels": dict(labels)}
    if spec.profiling.pod_annotations:
        meta["annotations"] = dict(spec.profiling.pod_annotations)
    return meta


def profiling_job(spec: SpeculativeDeploymentSpec, job: ProfilingJob) -> Manifest:
    """The Job manifest; owner references are added by the write planner (it is shared)."""
    labels = job_labels(job)
    pod_spec: dict[str, object] = {
        "restartPolicy": "Never",
        "serviceAccountName": PROFILER_ACCOUNT,
        "securityContext": pod_security(),
        "containers": [_container(spec, job)],
        "volumes": [CACHE_VOLUME],
        **scheduling(spec, {GPU_PRODUCT_LABEL: job.fingerprint.gpu_type}),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.job_name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": {
                FINGERPRINT_ANNOTATION: job.fingerprint.model_dump_json(
                    by_alias=True, exclude_none=True
                ),
            },
        },
        "spec": {
            "backoffLimit": spec.profiling.backoff_limit,
            "activeDeadlineSeconds": spec.profiling.active_deadline_seconds,
            "podFailurePolicy": pod_failure_policy(),
            "template": {"metadata": _pod_metadata(spec, labels), "spec": pod_spec},
        },
    }
