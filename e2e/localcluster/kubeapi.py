"""The harness's REST verbs over the shared stdlib client (``specdeploy.runtime.kubeapi``).

The harness needs a dozen verbs (get, list, create, patch, delete, token
requests) against one local server. The transport, credentials and
``ApiError`` are the ones the operator and the profiler use too (stdlib, so
the dev extra stays free of the ``kubernetes`` package and its untyped
surface, and mypy --strict stays meaningful); this module adds the verbs,
the kinds the harness touches, and the harness's shorter timeout.
Credentials are client certificates (admin, components) or bearer tokens
(ServiceAccounts, so that RBAC applies to what a test does with them).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdeploy.runtime.kubeapi import (
    MERGE_PATCH,
    ApiError,
    Client,
    Credentials,
    Obj,
    get_or_none,
)

__all__ = [
    "PLURALS",
    "ApiError",
    "Credentials",
    "KubeApi",
    "Obj",
    "collection_path",
    "object_path",
    "path_for",
]

# Kinds the harness touches -> their plural resource names.
PLURALS: Mapping[str, str] = {
    "ConfigMap": "configmaps",
    "Deployment": "deployments",
    "Job": "jobs",
    "Namespace": "namespaces",
    "Node": "nodes",
    "Pod": "pods",
    "ReplicaSet": "replicasets",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Secret": "secrets",
    "ServiceAccount": "serviceaccounts",
    "CustomResourceDefinition": "customresourcedefinitions",
}


def path_for(
    kind: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    api_version: str = "v1",
) -> str:
    """The REST path of a collection or object: ``/apis/apps/v1/namespaces/x/deployments/y``."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace is not None:
        parts.append(f"namespaces/{namespace}")
    parts.append(PLURALS[kind])
    if name is not None:
        parts.append(name)
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


def object_path(obj: Mapping[str, Any]) -> str:
    """The REST path of an object given as a manifest."""
    meta = obj["metadata"]
    return path_for(
        obj["kind"],
        namespace=meta.get("namespace"),
        name=meta["name"],
        api_version=obj["apiVersion"],
    )


def collection_path(obj: Mapping[str, Any]) -> str:
    """The REST path of the collection a manifest is created in."""
    return path_for(
        obj["kind"], namespace=obj["metadata"].get("namespace"), api_version=obj["apiVersion"]
    )


class KubeApi(Client):
    """The shared client, with the verbs the harness uses and a shorter default timeout."""

    def __init__(self, credentials: Credentials, *, timeout: float = 15.0) -> None:
        super().__init__(credentials, timeout=timeout)

    @classmethod
    def from_kubeconfig(cls, path: Path, *, timeout: float = 15.0) -> KubeApi:
        return cls(Credentials.from_kubeconfig(path), timeout=timeout)

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Obj | None:
        """GET that answers None for a 404, for "is it gone yet?" polls."""
        return get_or_none(self, path)

    def items(self, path: str, **query: str) -> list[Obj]:
        """The items of a list request."""
        found: list[Obj] = self.get(path, **query).get("items", [])
        return found

    def create(self, obj: Mapping[str, Any]) -> Obj:
        """Create a manifest in its collection."""
        return self.request("POST", collection_path(obj), body=obj)

    def post(self, path: str, body: object) -> Obj:
        return self.request("POST", path, body=body)

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Obj:
        return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def delete(self, path: str, *, propagation: str = "Background") -> Obj:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        return self.request("DELETE", path, body=body)

    def request_token(
        self,
        namespace: str,
        service_account: str,
        *,
        audiences: list[str] | None = None,
        seconds: int = 3600,
        bound_pod: Mapping[str, Any] | None = None,
    ) -> str:
        """A ServiceAccount token from the TokenRequest API, optionally bound to a pod."""
        spec: Obj = {"expirationSeconds": seconds}
        if audiences:
            spec["audiences"] = audiences
        if bound_pod is not None:
            meta = bound_pod["metadata"]
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            }
        path = path_for(
            "ServiceAccount", namespace=namespace, name=service_account, subresource="token"
        )
        answer = self.post(path, {"apiVersion": "authentication.k8s.io/v1", "spec": spec})
        token: str = answer["status"]["token"]
        return token
