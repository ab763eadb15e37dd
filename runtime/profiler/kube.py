"""Just enough of a Kubernetes API client to write one custom resource from a pod.

The runtime stays light (no kubernetes package): requests are plain values
(``ApiRequest``) built by the caller and sent by ``KubeClient.send`` over
urllib, so tests can check what would be sent without a server.

Where the API and the credentials are (``in_cluster``):

* server: ``SPECDEPLOY_KUBE_API`` (a URL; the local cluster and tests point
  it at 127.0.0.1), else ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``
  as the kubelet sets in every pod;
* credentials: the service-account directory
  ``/var/run/secrets/kubernetes.io/serviceaccount`` (``token``, ``ca.crt``,
  ``namespace``), or ``SPECDEPLOY_SERVICEACCOUNT_DIR`` instead, or the
  single files ``SPECDEPLOY_KUBE_TOKEN_FILE`` and ``SPECDEPLOY_KUBE_CA_FILE``.

The token is re-read for each request: projected tokens rotate.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
ENV_API = "SPECDEPLOY_KUBE_API"
ENV_SA_DIR = "SPECDEPLOY_SERVICEACCOUNT_DIR"
ENV_TOKEN_FILE = "SPECDEPLOY_KUBE_TOKEN_FILE"
ENV_CA_FILE = "SPECDEPLOY_KUBE_CA_FILE"


class KubeUnavailable(RuntimeError):
    """The API server could not be reached or answered nothing usable (transient)."""


@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to authenticate to it."""

    server: str
    token_file: Path | None = None
    ca_file: Path | None = None
    namespace: str | None = None
    """The pod's own namespace (the service account's), if known."""

    def token(self) -> str | None:
        if self.token_file is None or not self.token_file.is_file():
            return None
        return self.token_file.read_text(encoding="utf-8").strip() or None


def in_cluster(env: Mapping[str, str] | None = None) -> KubeConfig | None:
    """The API server and credentials of this pod, or None when not in one."""
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
    return KubeConfig(
        server=server.rstrip("/"),
        token_file=token,
        ca_file=ca if ca.is_file() else None,
        namespace=namespace or None,
    )


@dataclass(frozen=True)
class ApiRequest:
    """One API call, as a value: method, path under the server, JSON body."""

    method: str
    path: str
    body: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def message(self) -> str:
        """The API's own explanation (a Status object's ``message``), or the status."""
        text = self.body.get("message") if isinstance(self.body, dict) else None
        return f"HTTP {self.status}: {text}" if text else f"HTTP {self.status}"


class KubeClient:
    """Sends ``ApiRequest`` values; every HTTP status comes back as an ``ApiResponse``."""

    def __init__(self, config: KubeConfig, *, timeout_s: float = 30.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._tls = _tls_context(config) if config.server.startswith("https:") else None

    def send(self, request: ApiRequest) -> ApiResponse:
        """Send one request; raise KubeUnavailable when no HTTP answer came back."""
        data = None if request.body is None else json.dumps(request.body).encode()
        http = urllib.request.Request(
            self.config.server + request.path, data=data, method=request.method
        )
        http.add_header("Accept", "application/json")
        if data is not None:
            http.add_header("Content-Type", "application/json")
        token = self.config.token()
        if token:
            http.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(http, timeout=self.timeout_s, context=self._tls) as resp:
                return ApiResponse(resp.status, _json(resp.read()))
        except urllib.error.HTTPError as err:
            return ApiResponse(err.code, _json(err.read()))
        except (urllib.error.URLError, OSError) as err:
            raise KubeUnavailable(f"{request.method} {request.path}: {err}") from err


def _tls_context(config: KubeConfig) -> ssl.SSLContext:
    if config.ca_file is not None:
        return ssl.create_default_context(cafile=str(config.ca_file))
    return ssl.create_default_context()


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw[:200].decode("utf-8", errors="replace")}
    return value if isinstance(value, dict) else {}
