"""The vLLM Deployment of one pool.

The container runs ``vllm serve`` with:

* ``--speculative-config``: the method, the draft model, maxK as
  ``num_speculative_tokens`` and the *start-up table* as
  ``num_speculative_tokens_per_batch_size``. vLLM builds its per-step lookup
  only when a table is configured (the add-on replaces that lookup), and the
  V2 runner captures CUDA graphs only for the K values in it, so the start-up
  table names every K of 0..maxK (``startup_table``): the pod's fixed K set.
  It depends on the spec alone, never on a profile: the schedule in force
  comes from the table ConfigMap, so a new table (re-profiled, or re-derived
  from live telemetry) changes no pod template and restarts nothing;
* ``--scheduler-cls``: the add-on's scheduler factory (``SCHEDULER_CLS``);
* the table ConfigMap mounted at ``TABLE_DIR`` (re-read by the add-on on change);
* ``SPECDEPLOY_ALLOWED_K``: 0..maxK, the K set above. The add-on keeps K
  inside the K set the engine started with, and a pod must always be able to
  reach K=0 when acceptance collapses (the review's "sits at K=1 for good");
* GPUs as ``nvidia.com/gpu`` and tensor parallelism, pinned to the GPU type;
* probes on ``/health``; the add-on's metrics on their own port;
* graceful drain, as KServe does it: a ``preStop`` pause while endpoints are
  removed, then vLLM's ``--shutdown-timeout`` to finish in-flight requests,
  all inside ``terminationGracePeriodSeconds``.

Rolling updates surge one replica and keep every ready one until its
replacement is ready (``maxUnavailable: 0``). What still changes the template
(and so rolls the pods): the spec's serving fields, the profile's name (a new
fingerprint) and turning speculation off altogether (a profile whose verdict
says speculation loses everywhere: plain vLLM has no drafter to pay for).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from specdeploy.operator.api import (
    GPU_PRODUCT_LABEL,
    SHUTDOWN_MARGIN_SECONDS,
    SpeculativeDeploymentSpec,
)
from specdeploy.operator.builders.common import (
    CANARY_LABEL,
    PROFILE_LABEL,
    REFERENCE_LABEL,
    SERVING,
    Manifest,
    Parent,
    metadata,
    parent_labels,
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
from specdeploy.runtime.contract import SCHEDULER_CLS, TABLE_FILE, PodEnv

CONTAINER = "vllm"
HTTP_PORT = 8000
METRICS_PORT = 9400
TABLE_DIR = "/etc/specdeploy/table"
"""Left between vLLM's own shutdown timeout and the kubelet's SIGKILL."""


@dataclass(frozen=True)
class ServingPool:
    """A pool ready to serve: its names, shape and K schedule (None: no speculation)."""

    name: str
    configmap: str
    gpu_type: str
    gpus_per_replica: int
    replicas: int | None
    """None: left out of what is applied (an HPA or KEDA owns the field)."""
    profile: str | None
    schedule: tuple[tuple[int, int, int], ...] | None
    canary: bool = False
    """The live floor's canary: one speculating replica beside a pool running plain
    decoding, selected apart (``CANARY_LABEL``) so each Deployment owns only its pods."""
    reference: bool = False
    """The live floor's plain reference: one replica without speculation beside a
    speculating pool (``pool.plain_reference``), selected apart (``REFERENCE_LABEL``)."""


def startup_table(max_k: int) -> list[list[int]]:
    """The start-up ``num_speculative_tokens_per_batch_size``: every K of 0..maxK once.

    K falls as the batch size doubles (maxK at 1, maxK-1 at 2, maxK-2 at 3-4, ...,
    0 from the next power of two on), so that an engine that never loads
    a table file (missing or invalid from the start) still speculates where
    speculation is cheapest and stops where the GPU is compute-bound.
    """
    table, lo = [], 1
    for k in range(max_k, 0, -1):
        hi = 1 if lo == 1 else 2 * (lo - 1)
        table.append([lo, hi, k])
        lo = hi + 1
    table.append([lo, lo, 0])
    return table


def speculative_config(spec: SpeculativeDeploymentSpec) -> str:
    """vLLM's ``--speculative-config`` JSON (keys sorted: the same spec, the same bytes)."""
    s = spec.speculation
    config: dict[str, object] = {
        "method": s.method.value,
        "num_speculative_tokens": s.max_k,
        "num_speculative_tokens_per_batch_size": startup_table(s.max_k),
    }
    if s.draft_model is not None:
        config["model"] = s.draft_model
    if s.draft_revision is not None:
        config["revision"] = s.draft_revision
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def shutdown_timeout(spec: SpeculativeDeploymentSpec) -> int:
    v = spec.vllm
    left = spec.grace_seconds() - v.pre_stop_seconds - SHUTDOWN_MARGIN_SECONDS
    return max(1, left)


def vllm_args(spec: SpeculativeDeploymentSpec, pool: ServingPool) -> list[str]:
    args = [
        spec.model.name,
        f"--revision={spec.model.revision}",
        f"--served-model-name={spec.served_name()}",
        f"--dtype={spec.model.dtype}",
        f"--port={HTTP_PORT}",
        f"--tensor-parallel-size={pool.gpus_per_replica}",
        f"--shutdown-timeout={shutdown_timeout(spec)}",
    ]
    if pool.schedule is not None:
        args.append(f"--speculative-config={speculative_config(spec)}")
        args.append(f"--scheduler-cls={SCHEDULER_CLS}")
    return [*args, *spec.vllm.extra_args]


def _env(spec: SpeculativeDeploymentSpec, pool: ServingPool) -> list[dict[str, object]]:
    env: list[dict[str, object]] = [
        {"name": PodEnv.TABLE_FILE.value, "value": f"{TABLE_DIR}/{TABLE_FILE}"},
        {"name": PodEnv.POLICY.value, "value": spec.speculation.policy.value},
        {"name": PodEnv.METRICS_PORT.value, "value": str(METRICS_PORT)},
        {"name": PodEnv.POOL.value, "value": pool.gpu_type},
    ]
    if pool.profile is not None:
        env.append({"name": PodEnv.PROFILE.value, "value": pool.profile})
    if pool.schedule is not None:
        env.append({"name": PodEnv.ALLOWED_K.value, "value": allowed_k(spec.speculation.max_k)})
    return [*env, *cache_env(), *hf_token_env(spec)]


def allowed_k(max_k: int) -> str:
    """The add-on's K set: 0..maxK, the start-up table's K values, e.g. ``0,1,2,3``."""
    return ",".join(str(k) for k in range(max_k + 1))


def _probe(period: int, failures: int) -> dict[str, object]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def _container(spec: SpeculativeDeploymentSpec, pool: ServingPool) -> dict[str, object]:
    return {
        "name": CONTAINER,
        "image": spec.vllm.image,
        "command": ["vllm", "serve"],
        "args": vllm_args(spec, pool),
        "env": _env(spec, pool),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": container_resources(spec, pool.gpus_per_replica),
        # Model loading takes minutes: the startup probe holds the other two off.
        "startupProbe": _probe(10, 180),
        "readinessProbe": _probe(5, 3),
        "livenessProbe": _probe(10, 6),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(spec.vllm.pre_stop_seconds)]}}},
        "volumeMounts": [
            {"name": "table", "mountPath": TABLE_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            CACHE_MOUNT,
        ],
        "securityContext": container_security(),
    }


def _pod_spec(spec: SpeculativeDeploymentSpec, pool: ServingPool) -> dict[str, object]:
    return {
        "containers": [_container(spec, pool)],
        "terminationGracePeriodSeconds": spec.grace_seconds(),
        # vLLM needs no API access: no token in the pod (review M8)
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "volumes": [
            {"name": "table", "configMap": {"name": pool.configmap}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            CACHE_VOLUME,
        ],
        **scheduling(spec, {GPU_PRODUCT_LABEL: pool.gpu_type}),
    }


def serving_deployment(
    parent: Parent, spec: SpeculativeDeploymentSpec, pool: ServingPool
) -> Manifest:
    labels = parent_labels(parent, SERVING, pool.gpu_type)
    if pool.canary:
        labels[CANARY_LABEL] = "true"
    if pool.reference:
        labels[REFERENCE_LABEL] = "true"
    pod_labels = dict(labels)
    if pool.profile is not None:
        pod_labels[PROFILE_LABEL] = pool.profile
    replicas = {} if pool.replicas is None else {"replicas": pool.replicas}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(parent, pool.name, labels),
        "spec": {
            **replicas,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        **(spec.vllm.pod_annotations or {}),
                        "prometheus.io/port": str(METRICS_PORT),
                    },
                },
                "spec": _pod_spec(spec, pool),
            },
        },
    }
