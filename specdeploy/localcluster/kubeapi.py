"""The one module that talks to the API server: a small, typed REST client.

The harness needs a dozen verbs (get, list, create, patch, delete, token
requests) against one local server. A stdlib client keeps the dev extra free
of the ``kubernetes`` package and its untyped surface, so mypy --strict stays
meaningful, and makes each request a plain value that tests can read.
Credentials are client certificates (admin, components) or bearer tokens
(ServiceAccounts, so that RBAC applies to what a test does with them).
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

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


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code, ``reason`` Kubernetes' own."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        self.reason: str = payload.get("reason", "") if isinstance(payload, dict) else ""
        message = payload.get("message", body) if isinstance(payload, dict) else body
        super().__init__(f"{method} {path}: {status} {self.reason}: {message}")


@dataclass(frozen=True)
class Credentials:
    """Where the server is and how to prove who we are."""

    server: str
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None
    token_file: Path | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        """Read the current context of a kubeconfig that uses file paths."""
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = _named(config["contexts"], context_name)["context"]
        cluster = _named(config["clusters"], context["cluster"])["cluster"]
        user = _named(config["users"], context["user"])["user"]

        def opt(key: str) -> Path | None:
            return Path(user[key]) if key in user else None

        return cls(
            server=cluster["server"],
            ca_file=Path(cluster["certificate-authority"]),
            cert_file=opt("client-certificate"),
            key_file=opt("client-key"),
            token=user.get("token"),
            token_file=opt("tokenFile"),
        )

    def bearer(self) -> str | None:
        """The token, re-read from its file each time (projected tokens rotate)."""
        if self.token_file is not None:
            return self.token_file.read_text().strip()
        return self.token


def _named(items: list[Obj], name: str) -> Obj:
    for item in items:
        if item["name"] == name:
            return item
    raise KeyError(f"kubeconfig has no entry named {name!r}")


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


class KubeApi:
    """Blocking JSON requests against one API server with one identity."""

    def __init__(self, credentials: Credentials, *, timeout: float = 15.0) -> None:
        self.credentials = credentials
        self.timeout = timeout
        url = urllib.parse.urlsplit(credentials.server)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 443
        self._ssl = ssl.create_default_context(cafile=str(credentials.ca_file))
        if credentials.cert_file is not None and credentials.key_file is not None:
            self._ssl.load_cert_chain(str(credentials.cert_file), str(credentials.key_file))

    @classmethod
    def from_kubeconfig(cls, path: Path, *, timeout: float = 15.0) -> KubeApi:
        return cls(Credentials.from_kubeconfig(path), timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """Send one request; return the decoded JSON object or raise ApiError."""
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        token = self.credentials.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        conn = http.client.HTTPSConnection(
            self._host, self._port, context=self._ssl, timeout=self.timeout
        )
        try:
            conn.request(method, target, body=payload, headers=headers)
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        if not 200 <= response.status < 300:
            raise ApiError(method, target, response.status, text)
        decoded: Obj = json.loads(text) if text else {}
        return decoded

    def get(self, path: str, **query: str) -> Obj:
        return self.request("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Obj | None:
        """GET that answers None for a 404, for "is it gone yet?" polls."""
        try:
            return self.get(path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

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
        return self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

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
