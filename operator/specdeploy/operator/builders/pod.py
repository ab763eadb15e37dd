"""Pod fragments shared by the profiling Job and the serving Deployment."""

from __future__ import annotations

from collections.abc import Mapping

from specdeploy.operator.api import GPU_RESOURCE, ResourceAmounts, SpeculativeDeploymentSpec

HF_TOKEN_ENV = "HF_TOKEN"
DEFAULT_CPU_PER_GPU = 4
DEFAULT_MEMORY_REQUEST_GI_PER_GPU = 16
DEFAULT_MEMORY_LIMIT_GI_PER_GPU = 64


def _amounts(given: ResourceAmounts | None) -> dict[str, str]:
    if given is None:
        return {}
    return {k: v for k, v in (("cpu", given.cpu), ("memory", given.memory)) if v is not None}


def container_resources(spec: SpeculativeDeploymentSpec, gpus: int) -> dict[str, object]:
    """Requests and limits of the vLLM container: the GPUs, plus CPU and memory (review M8).

    The spec's ``vllm.resources`` as given, or per-GPU defaults (``ContainerResources``
    says why there is no CPU limit by default).
    """
    given = spec.vllm.resources
    if given is None:
        requests = {
            "cpu": str(DEFAULT_CPU_PER_GPU * gpus),
            "memory": f"{DEFAULT_MEMORY_REQUEST_GI_PER_GPU * gpus}Gi",
        }
        limits = {"memory": f"{DEFAULT_MEMORY_LIMIT_GI_PER_GPU * gpus}Gi"}
    else:
        requests, limits = _amounts(given.requests), _amounts(given.limits)
    return {
        "limits": {**limits, GPU_RESOURCE: str(gpus)},
        "requests": {**requests, GPU_RESOURCE: str(gpus)},
    }


def hf_token_env(spec: SpeculativeDeploymentSpec) -> list[dict[str, object]]:
    """HF_TOKEN from the model's token Secret, when it names one."""
    ref = spec.model.token_secret_ref
    if ref is None:
        return []
    selector = {"name": ref.name, "key": ref.key}
    return [{"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": selector}}]


def scheduling(spec: SpeculativeDeploymentSpec, pin: Mapping[str, str]) -> dict[str, object]:
    """nodeSelector (the spec's, plus ``pin``) and tolerations for a pod spec."""
    fragment: dict[str, object] = {"nodeSelector": {**(spec.node_selector or {}), **pin}}
    if spec.tolerations:
        fragment["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations
        ]
    return fragment


RUNTIME_USER = 10001
"""The runtime image's user (images/runtime.Dockerfile: ``USER 10001``)."""
CACHE_DIR = "/var/cache/specdeploy"
"""Writable scratch for the Hugging Face and compile caches (not the image's layer)."""


def pod_security() -> dict[str, object]:
    """Pod-level hardening (review M8): non-root, seccomp RuntimeDefault, the caches'
    volume group-writable for the runtime user - what Pod Security ``restricted`` asks."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_USER,
        "runAsGroup": RUNTIME_USER,
        "fsGroup": RUNTIME_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, object]:
    """Container-level hardening (review M8): no privilege escalation, every capability dropped."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def cache_env() -> list[dict[str, object]]:
    """Caches on the scratch volume, not the container's layer."""
    return [
        {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
        {"name": "XDG_CACHE_HOME", "value": CACHE_DIR},
    ]


CACHE_VOLUME = {"name": "cache", "emptyDir": {}}
CACHE_MOUNT = {"name": "cache", "mountPath": CACHE_DIR}
