"""One JSON request against the API server, through the official client's ``ApiClient``.

specdeploy speaks REST paths and plain dicts (``paths``, ``requests``), not
the generated model classes: manifests are built as dicts, custom resources
have no generated class, and a dict compares, hashes and patches as it is.
So this wrapper uses only the transport layer of ``kubernetes.client``
(``ApiClient.param_serialize`` and ``call_api``), which brings what users'
clusters need from a client: its ``Configuration`` (TLS, proxies and
``$NO_PROXY``, credentials that refresh: exec plugins, OIDC, rotating
ServiceAccount tokens), pooled connections, urllib3's connection retries and
client-go's Retry-After retries of reads. The generated code is untyped; the
surface here is typed, so mypy --strict sees every call.

* ``Client.exchange``: one request, every HTTP status answered as
  ``(status, raw body)``; a request that got no answer raises one of
  ``TRANSPORT_ERRORS``. ``Client.request``: the same, JSON decoded, with a
  non-2xx answer raised as ``ApiError``.
* ``Client.credentials``: the server and identity as plain values, for kopf
  (whose watches then log in as our writes do) and for the harness.
* ``get_or_none``: the "is it there (still)?" read.
"""

from __future__ import annotations

import copy
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import should_bypass_proxies

from specdeploy.runtime.kube.requests import APPLY_PATCH, JSON, JSON_PATCH, Query, yaml_safe_json

__all__ = [
    "DEFAULT_TIMEOUT",
    "TRANSPORT_ERRORS",
    "ApiError",
    "Client",
    "Credentials",
    "Obj",
    "Requester",
    "Unreachable",
    "get_or_none",
]

Obj = dict[str, Any]
DEFAULT_TIMEOUT = 30.0
USER_AGENT = "specdeploy"
BEARER = "BearerToken"
"""The ``Configuration.api_key`` entry the official loaders keep the Authorization header in."""


class Unreachable(ConnectionError):
    """No HTTP answer came back: refused, reset, timed out, or the TLS handshake failed."""


TRANSPORT_ERRORS: tuple[type[Exception], ...] = (OSError, urllib3.exceptions.HTTPError)
"""What a request that got no HTTP answer raises (``Unreachable`` is an ``OSError``)."""


class ApiError(Exception):
    """A non-2xx answer: ``status`` is the HTTP code, ``reason`` and ``message`` Kubernetes' own.

    The server answers failures with a ``Status`` object; when the body is not
    one (a proxy's HTML page, say) the whole body is the message.
    """

    def __init__(self, method: str, path: str, status: int, body: str | bytes) -> None:
        text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
        self.method = method
        self.path = path
        self.status = status
        try:
            payload = json.loads(text)
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        self.reason = str(payload.get("reason", ""))
        self.message = str(payload.get("message", text))
        details = payload.get("details")
        wait = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        self.retry_after: float | None = float(wait) if isinstance(wait, int | float) else None
        """The server's ``retryAfterSeconds`` (a 429, a 5xx under load): wait at least this."""
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


class Requester(Protocol):
    """Anything that sends one JSON request: a ``Client``, or a test's fake of one."""

    def request(self, method: str, path: str) -> Obj: ...


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """The server and how we prove who we are, as plain values (file paths, not data)."""

    server: str
    ca_file: Path | None = None
    """None: the system's trust store."""
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure: bool = False
    scheme: str | None = None
    """The Authorization scheme (``Bearer``, ``Basic``), None without a header."""
    token: str | None = None
    proxy: str | None = None
    """The proxy this server is reached through (``$NO_PROXY`` already applied)."""
    namespace: str | None = None
    """The identity's own namespace (a pod's ServiceAccount's, a context's), if known."""


class Client:
    """Blocking JSON requests against one API server with one identity.

    ``configuration`` is a ``kubernetes.client.Configuration``, as
    ``specdeploy.runtime.kube.config`` loads it; the client takes it over.
    """

    def __init__(
        self,
        configuration: Any,
        *,
        namespace: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        # client-go's habit: a read answered 429 or 5xx with Retry-After is retried.
        configuration.client_go_retries = True
        self.configuration = configuration
        self.namespace = namespace
        self.timeout = timeout
        self._api = ApiClient(configuration)
        self._api.user_agent = USER_AGENT

    @property
    def user_agent(self) -> str:
        """The ``User-Agent`` this client sends (the API server's audit log records it)."""
        return str(self._api.user_agent)

    @user_agent.setter
    def user_agent(self, value: str) -> None:
        self._api.user_agent = value

    def exchange(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = JSON,
        query: Query = (),
    ) -> tuple[int, bytes]:
        """Send one request; return its status and raw body, whatever the status.

        Raises one of ``TRANSPORT_ERRORS`` when no answer came back.
        """
        if content_type == JSON_PATCH and not isinstance(body, list):
            # The official REST layer would quietly send it as a strategic merge patch.
            raise ValueError(f"{method} {path}: a JSON patch is a list of operations")
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        if content_type == APPLY_PATCH and body is not None and not isinstance(body, str | bytes):
            body = yaml_safe_json(body)  # sent as given: the REST layer passes bytes through
        params = list(query.items()) if isinstance(query, Mapping) else list(query)
        _, url, headers, payload, _ = self._api.param_serialize(
            method,
            path,
            query_params=params or None,
            header_params=headers,
            body=body,
            auth_settings=[BEARER],
        )
        try:
            response = self._api.call_api(
                method, url, header_params=headers, body=payload, _request_timeout=self.timeout
            )
            return int(response.status), bytes(response.read())
        except urllib3.exceptions.HTTPError as err:
            raise Unreachable(f"{method} {path}: {err}") from err
        except ApiException as err:
            if err.status:  # a read still refused after its Retry-After retries: an answer
                return int(err.status), str(err.reason or "").encode()
            raise Unreachable(f"{method} {path}: {err.reason}") from err  # TLS failed

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = JSON,
        query: Query = (),
    ) -> Obj:
        """Send one request; return the decoded JSON object or raise ApiError."""
        status, raw = self.exchange(method, path, body=body, content_type=content_type, query=query)
        if not 200 <= status < 300:
            target = path + ("?" + urllib.parse.urlencode(query) if query else "")
            raise ApiError(method, target, status, raw)
        decoded: Obj = json.loads(raw) if raw else {}
        return decoded

    def credentials(self) -> Credentials:
        """Who this client is now: a rotating token is re-read, an expired exec token renewed."""
        config = self.configuration
        header = config.get_api_key_with_prefix(BEARER)  # runs the loaders' refresh hook
        scheme, _, token = str(header or "").partition(" ")
        if not token:  # a bare token (RFC 7235 allows a header with no scheme)
            scheme, token = "", scheme
        proxy = config.proxy
        if proxy and should_bypass_proxies(config.host, config.no_proxy or ""):
            proxy = None
        return Credentials(
            server=str(config.host),
            ca_file=_path(config.ssl_ca_cert),
            cert_file=_path(config.cert_file),
            key_file=_path(config.key_file),
            insecure=not config.verify_ssl,
            scheme=scheme or None,
            token=token or None,
            proxy=proxy or None,
            namespace=self.namespace,
        )

    def with_token(self, token: str | None) -> Client:
        """The same server and trust, another identity: a ServiceAccount's token, or none.

        What a test does with a ServiceAccount's token is subject to RBAC,
        as what its pod would do; no token at all is the anonymous user.
        """
        config = copy.deepcopy(self.configuration)
        config.cert_file = config.key_file = None
        config.refresh_api_key_hook = None
        config.api_key = {BEARER: f"Bearer {token}"} if token else {}
        other = Client(config, namespace=self.namespace, timeout=self.timeout)
        other.user_agent = self.user_agent
        return other

    def close(self) -> None:
        """Close the pooled connections."""
        self._api.close()


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def get_or_none(api: Requester, path: str) -> Obj | None:
    """GET that answers None for a 404: "is it there (still)?" without an exception."""
    try:
        return api.request("GET", path)
    except ApiError as err:
        if err.status == 404:
            return None
        raise
