"""Just enough of a Kubernetes API client to write one custom resource from a pod.

Requests are plain values (``ApiRequest``) built by the caller (the writer)
and sent by ``KubeClient.send``, so tests can check what would be sent
without a server. Unlike the operator, the writer decides on every status
itself (409: replace, 429/5xx: retry), so ``send`` answers each one as an
``ApiResponse`` and raises only when no answer came back.

The transport and where the API and the credentials are
(``in_cluster``: ``$SPECDEPLOY_KUBE_API`` or the kubelet's
``KUBERNETES_SERVICE_*``, the ServiceAccount directory or its overrides) are
the shared ``specdeploy.runtime.kubeapi``; this module re-exports them under
the names the profiler uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.runtime.kubeapi import (
    ENV_API,
    ENV_CA_FILE,
    ENV_SA_DIR,
    ENV_TOKEN_FILE,
    SERVICEACCOUNT_DIR,
    TRANSPORT_ERRORS,
    Client,
    in_cluster,
)
from specdeploy.runtime.kubeapi import Credentials as KubeConfig

__all__ = [
    "ENV_API",
    "ENV_CA_FILE",
    "ENV_SA_DIR",
    "ENV_TOKEN_FILE",
    "SERVICEACCOUNT_DIR",
    "ApiRequest",
    "ApiResponse",
    "KubeClient",
    "KubeConfig",
    "KubeUnavailable",
    "in_cluster",
]


class KubeUnavailable(RuntimeError):
    """The API server could not be reached or answered nothing usable (transient)."""


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
        self._client = Client(config, timeout=timeout_s)

    def send(self, request: ApiRequest) -> ApiResponse:
        """Send one request; raise KubeUnavailable when no HTTP answer came back."""
        try:
            status, raw = self._client.exchange(request.method, request.path, body=request.body)
        except TRANSPORT_ERRORS as err:
            raise KubeUnavailable(f"{request.method} {request.path}: {err}") from err
        return ApiResponse(status, _json(raw))


def _json(raw: bytes) -> dict[str, Any]:
    """The answer as an object; a body that is not JSON becomes its ``message``."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw[:200].decode("utf-8", errors="replace")}
    return value if isinstance(value, dict) else {}
