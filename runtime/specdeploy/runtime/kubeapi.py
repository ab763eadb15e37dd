"""The one stdlib Kubernetes API transport: where the server is, who we are, one JSON request.

The operator (``specdeploy.operator.k8s``), the local-cluster harness
(``e2e.localcluster.kubeapi``) and the profiler writing its
SpeculationProfile from a pod (``specdeploy.runtime.profiler.kube``) all talk
to the API server through this module. It lives in ``runtime`` because that
is the one layer all three may import (the profiler runs in GPU pods, which
must never import the operator or the harness), and it is stdlib only: no
``kubernetes`` package, whose pin needs a newer pydantic than the runtime's
and whose untyped surface would blind mypy --strict.

* ``Credentials``: the server and how to prove who we are, read from a
  kubeconfig (``from_kubeconfig``) or from the pod's ServiceAccount
  (``in_cluster``). A token file is re-read on every request: projected
  tokens rotate.
* ``Client.exchange``: one request, every HTTP status answered as
  ``(status, raw body)``; a request that got no answer raises one of
  ``TRANSPORT_ERRORS``. ``Client.request``: the same, JSON decoded, with a
  non-2xx answer raised as ``ApiError``.
* ``get_or_none``: the "is it there (still)?" read the operator and the
  harness both wrote.

One connection per request: callers are low-rate (a reconcile, a test
step, one profile write), and a fresh connection never trips over a server
that closed an idle one.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

Obj = dict[str, Any]
Query = Mapping[str, str] | Sequence[tuple[str, str]]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
ENV_API = "SPECDEPLOY_KUBE_API"
ENV_SA_DIR = "SPECDEPLOY_SERVICEACCOUNT_DIR"
ENV_TOKEN_FILE = "SPECDEPLOY_KUBE_TOKEN_FILE"
ENV_CA_FILE = "SPECDEPLOY_KUBE_CA_FILE"

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (OSError, http.client.HTTPException)
"""What a request that got no HTTP answer raises (refused, reset, timed out, TLS)."""


class ApiError(Exception):
    """A non-2xx answer: ``status`` is the HTTP code, ``reason`` and ``message`` Kubernetes' own.

    The server answers failures with a ``Status`` object; when the body is not
    one (a proxy's HTML page, say) the whole body is the message.
    """

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        self.reason = str(payload.get("reason", ""))
        self.message = str(payload.get("message", body))
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


class Requester(Protocol):
    """Anything that sends one JSON request: a ``Client``, or a test's fake of one."""

    def request(self, method: str, path: str) -> Obj: ...


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """Where the API server is and how to prove who we are."""

    server: str
    ca_file: Path | None = None
    """None: the system's trust store."""
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None
    token_file: Path | None = None
    insecure: bool = False
    namespace: str | None = None
    """The identity's own namespace (a pod's ServiceAccount's, a context's), if known."""

    def bearer(self) -> str | None:
        """The token, re-read from its file each time (projected tokens rotate).

        A token file that is not there sends no token: the server's 401 then
        says so, as for a wrong one.
        """
        if self.token_file is not None:
            if not self.token_file.is_file():
                return None
            return self.token_file.read_text(encoding="utf-8").strip() or None
        return self.token

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        """The current context of a kubeconfig (file paths or inline base64 data).

        Relative paths are relative to the kubeconfig, as kubectl reads them;
        inline data is written to private files, since ``ssl`` loads only files.
        """
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        context = _named(config["contexts"], config["current-context"])["context"]
        cluster = _named(config["clusters"], context["cluster"])["cluster"]
        user = _named(config["users"], context["user"])["user"]
        scratch: list[Path] = []

        def file(source: Obj, key: str, name: str) -> Path | None:
            if key in source:
                return (path.parent / str(source[key])).resolve()
            if f"{key}-data" in source:
                if not scratch:
                    scratch.append(Path(tempfile.mkdtemp(prefix="specdeploy-kube-")))
                return _data_file(scratch[0], name, source[f"{key}-data"])
            return None

        return cls(
            server=cluster["server"],
            ca_file=file(cluster, "certificate-authority", "ca.crt"),
            cert_file=file(user, "client-certificate", "client.crt"),
            key_file=file(user, "client-key", "client.key"),
            token=user.get("token"),
            token_file=Path(user["tokenFile"]) if "tokenFile" in user else None,
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            namespace=context.get("namespace"),
        )


def in_cluster(env: Mapping[str, str] | None = None) -> Credentials | None:
    """The API server and ServiceAccount of this pod, or None when not in one.

    Server: ``$SPECDEPLOY_KUBE_API`` (a URL; the local cluster and tests point
    it at 127.0.0.1), else ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``
    as the kubelet sets in every pod (an IPv6 host in brackets). Credentials:
    the ServiceAccount directory (``token``, ``ca.crt``, ``namespace``), or
    ``$SPECDEPLOY_SERVICEACCOUNT_DIR`` instead, or the single files
    ``$SPECDEPLOY_KUBE_TOKEN_FILE`` and ``$SPECDEPLOY_KUBE_CA_FILE``.
    """
    env = os.environ if env is None else env
    server = env.get(ENV_API)
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not server and host:
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    if not server:
        return None
    sa_dir = Path(env.get(ENV_SA_DIR, str(SERVICEACCOUNT_DIR)))
    token = Path(env[ENV_TOKEN_FILE]) if env.get(ENV_TOKEN_FILE) else sa_dir / "token"
    ca = Path(env[ENV_CA_FILE]) if env.get(ENV_CA_FILE) else sa_dir / "ca.crt"
    ns_file = sa_dir / "namespace"
    namespace = ns_file.read_text(encoding="utf-8").strip() if ns_file.is_file() else None
    return Credentials(
        server=server.rstrip("/"),
        token_file=token,
        ca_file=ca if ca.is_file() else None,
        namespace=namespace or None,
    )


def _named(items: list[Obj], name: str) -> Obj:
    for item in items:
        if item["name"] == name:
            return item
    raise KeyError(f"kubeconfig has no entry named {name!r}")


def _data_file(directory: Path, name: str, data: str) -> Path:
    path = directory / name
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return path


class Client:
    """Blocking JSON requests against one API server with one identity."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0) -> None:
        self.credentials = credentials
        self.timeout = timeout
        url = urllib.parse.urlsplit(credentials.server)
        self._plain = url.scheme == "http"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (80 if self._plain else 443)
        self._prefix = url.path.rstrip("/")
        self._ssl = None if self._plain else _tls_context(credentials)

    def exchange(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = JSON,
        query: Query | None = None,
    ) -> tuple[int, bytes]:
        """Send one request; return its status and raw body, whatever the status.

        Raises one of ``TRANSPORT_ERRORS`` when no answer came back.
        """
        target = self._prefix + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": JSON}
        token = self.credentials.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        conn: http.client.HTTPConnection
        if self._ssl is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        else:
            conn = http.client.HTTPSConnection(
                self._host, self._port, context=self._ssl, timeout=self.timeout
            )
        try:
            conn.request(method, target, body=payload, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = JSON,
        query: Query | None = None,
    ) -> Obj:
        """Send one request; return the decoded JSON object or raise ApiError."""
        status, raw = self.exchange(method, path, body=body, content_type=content_type, query=query)
        text = raw.decode()
        if not 200 <= status < 300:
            target = path + ("?" + urllib.parse.urlencode(query) if query else "")
            raise ApiError(method, target, status, text)
        decoded: Obj = json.loads(text) if text else {}
        return decoded


def _tls_context(credentials: Credentials) -> ssl.SSLContext:
    ca = str(credentials.ca_file) if credentials.ca_file is not None else None
    context = ssl.create_default_context(cafile=ca)
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if credentials.cert_file is not None and credentials.key_file is not None:
        context.load_cert_chain(str(credentials.cert_file), str(credentials.key_file))
    return context


def get_or_none(api: Requester, path: str) -> Obj | None:
    """GET that answers None for a 404: "is it there (still)?" without an exception."""
    try:
        return api.request("GET", path)
    except ApiError as err:
        if err.status == 404:
            return None
        raise
