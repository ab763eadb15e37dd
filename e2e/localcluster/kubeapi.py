"""The harness's REST verbs over the shared client (``specdeploy.runtime.kube``).

The harness needs a dozen verbs (get, list, create, patch, delete, token
requests) against one local server. The client, its ``ApiError`` and the
REST paths (``specdeploy.runtime.kube.paths``) are the ones the operator and
the profiler use, so the cluster tests exercise them end to end against a
real API server; this module adds only the verbs and the harness's shorter
timeout. Identities are client certificates (admin, components, read from
their kubeconfigs) or bearer tokens (``with_token``: ServiceAccounts, so
that RBAC applies to what a test does with them).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.client import ApiError, Client, Credentials, Obj, get_or_none
from specdeploy.runtime.kube.config import from_kubeconfig
from specdeploy.runtime.kube.requests import JSON, MERGE_PATCH, Query

__all__ = ["ApiError", "KubeApi", "Obj"]

TIMEOUT = 15.0


HARNESS_USER_AGENT = "specdeploy-localcluster"


class KubeApi:
    """The verbs the harness and its tests use, over one shared-client ``Client``."""

    def __init__(self, client: Client) -> None:
        self.client = client
        # Told apart from the operator's client (which says "specdeploy") in the audit log.
        client.user_agent = HARNESS_USER_AGENT

    @classmethod
    def from_kubeconfig(cls, path: Path, *, timeout: float = TIMEOUT) -> KubeApi:
        return cls(from_kubeconfig(str(path), timeout=timeout))

    def credentials(self) -> Credentials:
        return self.client.credentials()

    def with_token(self, token: str | None) -> KubeApi:
        """The same server as another identity: a ServiceAccount's token, or anonymous."""
        return KubeApi(self.client.with_token(token))

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = JSON,
        query: Query = (),
    ) -> Obj:
        return self.client.request(method, path, body=body, content_type=content_type, query=query)

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> Obj | None:
        """GET that answers None for a 404, for "is it gone yet?" polls."""
        return get_or_none(self.client, path)

    def items(self, path: str, **query: str) -> list[Obj]:
        """The items of a list request."""
        found: list[Obj] = self.get(path, **query).get("items", [])
        return found

    def create(self, obj: Mapping[str, Any]) -> Obj:
        """Create a manifest in its collection."""
        return self.request("POST", paths.collection_path(obj), body=obj)

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
        path = paths.path("ServiceAccount", namespace, service_account, "token")
        answer = self.post(path, {"apiVersion": "authentication.k8s.io/v1", "spec": spec})
        token: str = answer["status"]["token"]
        return token
