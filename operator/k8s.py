"""The only module that talks to the API server: a small JSON client, gather and send.

The client is stdlib ``http.client`` (no ``kubernetes`` package: its pin
needs a newer pydantic than the runtime's, and its untyped surface would
blind mypy). Credentials come from a kubeconfig or the pod's ServiceAccount,
the same sources kopf logs in with; a ServiceAccount token is re-read on
every request because projected tokens rotate.

``gather`` reads everything a decision needs into one ``Observed``;
``send`` sends planned requests. Tests replace the ``Api`` with a fake that
records requests; anything else would reach no network.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from specdeploy.operator import resources
from specdeploy.operator.api import KIND, PROFILE_KIND
from specdeploy.operator.builders.common import COMPONENT_LABEL, MANAGED_BY, PROFILING
from specdeploy.operator.observed import CHILD_KINDS, Observed
from specdeploy.operator.writes import Request

Obj = dict[str, Any]
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MANAGED_SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code, ``reason`` Kubernetes' own."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        self.reason = str(payload.get("reason", ""))
        super().__init__(f"{method} {path}: {status} {self.reason}: {payload.get('message', body)}")


class Api(Protocol):
    """What the operator needs from a client: one JSON request."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Sequence[tuple[str, str]] = (),
    ) -> Obj: ...


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who we are."""

    server: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None
    token_file: Path | None = None
    insecure: bool = False

    def bearer(self) -> str | None:
        if self.token_file is not None:
            return self.token_file.read_text(encoding="utf-8").strip()
        return self.token


def _data_file(directory: Path, name: str, data: str) -> Path:
    path = directory / name
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return path


def credentials_from_kubeconfig(path: Path) -> Credentials:
    """The current context of a kubeconfig (file paths or inline base64 data)."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    context = _named(config["contexts"], config["current-context"])["context"]
    cluster = _named(config["clusters"], context["cluster"])["cluster"]
    user = _named(config["users"], context["user"])["user"]
    scratch = Path(tempfile.mkdtemp(prefix="specdeploy-kube-"))

    def file(key: str, data_key: str, name: str) -> Path | None:
        source = cluster if key == "certificate-authority" else user
        if key in source:
            return (path.parent / str(source[key])).resolve()
        if data_key in source:
            return _data_file(scratch, name, source[data_key])
        return None

    return Credentials(
        server=cluster["server"],
        ca_file=file("certificate-authority", "certificate-authority-data", "ca.crt"),
        cert_file=file("client-certificate", "client-certificate-data", "client.crt"),
        key_file=file("client-key", "client-key-data", "client.key"),
        token=user.get("token"),
        token_file=Path(user["tokenFile"]) if "tokenFile" in user else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
    )


def credentials_in_cluster() -> Credentials | None:
    token = SERVICE_ACCOUNT_DIR / "token"
    if not token.exists():
        return None
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return Credentials(
        server=f"https://{host}:{port}", ca_file=SERVICE_ACCOUNT_DIR / "ca.crt", token_file=token
    )


def find_credentials() -> Credentials:
    """$KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config."""
    explicit = os.environ.get("KUBECONFIG")
    if explicit:
        return credentials_from_kubeconfig(Path(explicit.split(os.pathsep)[0]))
    in_cluster = credentials_in_cluster()
    if in_cluster is not None:
        return in_cluster
    return credentials_from_kubeconfig(Path.home() / ".kube" / "config")


def _named(items: list[Obj], name: str) -> Obj:
    for item in items:
        if item["name"] == name:
            return item
    raise KeyError(f"kubeconfig has no entry named {name!r}")


class Client:
    """Blocking JSON requests against one API server, one connection per request."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0) -> None:
        self.credentials = credentials
        self.timeout = timeout
        url = urllib.parse.urlsplit(credentials.server)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        ca = str(credentials.ca_file) if credentials.ca_file else None
        self._ssl = ssl.create_default_context(cafile=ca)
        if credentials.insecure:
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE
        if credentials.cert_file and credentials.key_file:
            self._ssl.load_cert_chain(str(credentials.cert_file), str(credentials.key_file))

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Sequence[tuple[str, str]] = (),
    ) -> Obj:
        target = path + ("?" + urllib.parse.urlencode(list(query)) if query else "")
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


# --- reading -------------------------------------------------------------


def get_or_none(api: Api, path: str) -> Obj | None:
    try:
        return api.request("GET", path)
    except ApiError as err:
        if err.status == 404:
            return None
        raise


def list_items(api: Api, path: str, selector: str | None = None) -> list[Obj]:
    query = (("labelSelector", selector),) if selector else ()
    items: list[Obj] = api.request("GET", path, query=query).get("items") or []
    return items


def _by_name(items: Iterable[Obj], kind: str) -> dict[str, Obj]:
    return {item["metadata"]["name"]: {"kind": kind, **item} for item in items}


def _pods_by_job(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    grouped: dict[str, list[Obj]] = {}
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if job:
            grouped.setdefault(job, []).append(pod)
    return grouped


def gather(api: Api, namespace: str, name: str) -> tuple[Obj | None, Observed]:
    """The deployment (None when gone) and everything its decision reads."""
    body = get_or_none(api, resources.path(KIND, namespace, name))
    if body is None:
        return None, Observed()
    children = {
        kind: _by_name(list_items(api, resources.path(kind, namespace), MANAGED_SELECTOR), kind)
        for kind in CHILD_KINDS
    }
    profiling_pods = f"{MANAGED_SELECTOR},{COMPONENT_LABEL}={PROFILING}"
    observed = Observed(
        nodes=list_items(api, resources.path("Node")),
        profiles=_by_name(list_items(api, resources.path(PROFILE_KIND, namespace)), PROFILE_KIND),
        children=children,
        job_pods=_pods_by_job(list_items(api, resources.path("Pod", namespace), profiling_pods)),
    )
    return body, observed


def list_deployments(api: Api, namespace: str | None = None) -> list[tuple[str, str]]:
    """(namespace, name) of every SpeculativeDeployment (in one namespace, or all)."""
    items = list_items(api, resources.path(KIND, namespace))
    return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items]


# --- writing -------------------------------------------------------------


class RetryLater(Exception):
    """Someone else changed an object between our read and our write: decide again."""


def send(api: Api, requests: Iterable[Request]) -> int:
    """Send each request in order; return how many were sent.

    A status listed in ``ok`` is success ("already so"). A conflict or a
    failed JSON-patch test means our view was stale: RetryLater.
    """
    sent = 0
    for req in requests:
        sent += 1
        try:
            api.request(
                req.method, req.path, body=req.body, content_type=req.content_type, query=req.query
            )
        except ApiError as err:
            if err.status in req.ok:
                continue
            if err.status in (409, 422) and req.method == "PATCH" and isinstance(req.body, list):
                raise RetryLater(str(err)) from err
            raise
    return sent


def owners_of(obj: Mapping[str, Any]) -> list[str]:
    """Names of the SpeculativeDeployments listed as owners of ``obj``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [str(r["name"]) for r in refs if r.get("kind") == KIND]
