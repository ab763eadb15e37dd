"""Where each kind lives in the API: REST paths as plain strings. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specdeploy.operator.api import API_VERSION, KIND, PLURAL, PROFILE_KIND, PROFILE_PLURAL

# kind -> (apiVersion, plural)
KINDS: Mapping[str, tuple[str, str]] = {
    "ConfigMap": ("v1", "configmaps"),
    "Service": ("v1", "services"),
    "ServiceAccount": ("v1", "serviceaccounts"),
    "Pod": ("v1", "pods"),
    "Event": ("v1", "events"),
    "Node": ("v1", "nodes"),
    "Deployment": ("apps/v1", "deployments"),
    "Job": ("batch/v1", "jobs"),
    "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    KIND: (API_VERSION, PLURAL),
    PROFILE_KIND: (API_VERSION, PROFILE_PLURAL),
}
CLUSTER_SCOPED = frozenset({"Node"})


def path(
    kind: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """``/apis/apps/v1/namespaces/ns/deployments/name[/sub]``; ``/api/v1/...`` for core kinds."""
    api_version, plural = KINDS[kind]
    parts = ["/api/v1" if api_version == "v1" else f"/apis/{api_version}"]
    if namespace is not None and kind not in CLUSTER_SCOPED:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name is not None:
        parts.append(name)
    if sub is not None:
        parts.append(sub)
    return "/".join(parts)


def path_of(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return path(obj["kind"], meta.get("namespace"), meta["name"])
