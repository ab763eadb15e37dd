"""Manifests the cluster tests create, as plain dicts: a request is a value before it is sent.

Pure builders with only the fields a test varies as arguments, so each test
reads as the behaviour it checks rather than as YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e2e.localcluster.stages import RUN_LOCALLY

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"


def meta(name: str, namespace: str, **extra: Any) -> Obj:
    return {"name": name, "namespace": namespace, **extra}


def service_account(name: str, namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, namespace)}


def config_map(name: str, namespace: str, data: Mapping[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, namespace),
        "data": dict(data),
    }


def role(name: str, namespace: str, resources: list[str], verbs: list[str]) -> Obj:
    rule = {"apiGroups": [""], "resources": resources, "verbs": verbs}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(name, namespace),
        "rules": [rule],
    }


def role_binding(name: str, namespace: str, *, role_name: str, service_account: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


def container(
    command: list[str],
    *,
    name: str = "main",
    gpus: int = 0,
    env: list[Obj] | None = None,
    mounts: list[Obj] | None = None,
) -> Obj:
    spec: Obj = {"name": name, "image": "specdeploy/local:none", "command": command}
    if gpus:
        spec["resources"] = {"limits": {GPU: str(gpus)}}
    if env:
        spec["env"] = env
    if mounts:
        spec["volumeMounts"] = mounts
    return spec


def pod_template(
    labels: Mapping[str, str],
    containers: list[Obj],
    *,
    product: str | None = None,
    run_locally: bool = False,
    restart_policy: str = "Always",
    service_account: str | None = None,
    volumes: list[Obj] | None = None,
) -> Obj:
    spec: Obj = {"containers": containers, "restartPolicy": restart_policy}
    if product:
        spec["nodeSelector"] = {PRODUCT_LABEL: product}
    if service_account:
        spec["serviceAccountName"] = service_account
    if volumes:
        spec["volumes"] = volumes
    metadata: Obj = {"labels": dict(labels)}
    if run_locally:
        metadata["annotations"] = {RUN_LOCALLY: "true"}
    return {"metadata": metadata, "spec": spec}


def deployment(name: str, namespace: str, template: Obj, *, replicas: int) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, namespace),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": template["metadata"]["labels"]},
            "template": template,
        },
    }


def job(name: str, namespace: str, template: Obj, *, backoff_limit: int = 0) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, namespace),
        "spec": {"backoffLimit": backoff_limit, "template": template},
    }


def owner_reference(owner: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
