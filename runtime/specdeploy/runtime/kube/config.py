"""Where the API server is and who we are: a kubeconfig, or the pod's ServiceAccount.

``connect`` looks where kubectl and client-go look, in this order: an
explicit kubeconfig (with a context, if one is named), ``$KUBECONFIG`` (a
list of files, merged as kubectl merges them), the pod's ServiceAccount,
``~/.kube/config``. Kubeconfigs are read by the official loader, so users'
clusters work as they do with kubectl: contexts, inline base64 certificate
data, token files, exec plugins and OIDC (refreshed when they expire),
``proxy-url``, ``tls-server-name``. Two of kubectl's rules the official
loader does not follow are restored here: in a ``$KUBECONFIG`` list the first
file's current context wins, and a token read from a file is trimmed.

In a pod (``in_cluster``) the loader is ours, over the official
``Configuration`` and its refresh hook, because the local cluster's kubelet
stand-in (``e2e/``) must be able to redirect it, which the official
``InClusterConfigLoader`` does not allow (it builds ``https://`` from
``KUBERNETES_SERVICE_HOST`` and re-sets the host on every token refresh):

* ``$SPECDEPLOY_KUBE_API``: the server's URL (tests point it at a plain-HTTP
  server on 127.0.0.1), else ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``
  as the kubelet sets in every pod (an IPv6 host in brackets);
* ``$SPECDEPLOY_SERVICEACCOUNT_DIR``: the ServiceAccount directory
  (``token``, ``ca.crt``, ``namespace``), which the stand-in rewrites to its
  local copy; ``$SPECDEPLOY_KUBE_TOKEN_FILE`` and ``$SPECDEPLOY_KUBE_CA_FILE``
  name the two files one by one.

The token file is re-read on every request: projected tokens rotate, and a
file read costs nothing next to an API call. A CA file that is not there
means the system's trust store; a token file that is not there when the
client is made sends no token, and the server's 401 then says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import Configuration
from kubernetes.config import ConfigException, list_kube_config_contexts, load_kube_config

from specdeploy.runtime.kube.client import BEARER, DEFAULT_TIMEOUT, Client
from specdeploy.runtime.kube.serviceaccount import ENV_SA_DIR, SERVICEACCOUNT_DIR

__all__ = [
    "ENV_API",
    "ENV_CA_FILE",
    "ENV_SA_DIR",
    "ENV_TOKEN_FILE",
    "SERVICEACCOUNT_DIR",
    "ConfigError",
    "connect",
    "from_kubeconfig",
    "in_cluster",
]

ENV_API = "SPECDEPLOY_KUBE_API"
ENV_TOKEN_FILE = "SPECDEPLOY_KUBE_TOKEN_FILE"
ENV_CA_FILE = "SPECDEPLOY_KUBE_CA_FILE"


class ConfigError(RuntimeError):
    """No usable kubeconfig and no ServiceAccount: nowhere to connect to."""


def connect(
    kubeconfig: Path | None = None,
    context: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Client:
    """A client for the cluster kubectl would talk to (module docstring for the order).

    A named context only exists in a kubeconfig, so with one the pod's
    ServiceAccount is not considered.
    """
    env = os.environ if env is None else env
    if kubeconfig is not None:
        return from_kubeconfig(str(kubeconfig), context, timeout=timeout)
    if env.get("KUBECONFIG"):
        return from_kubeconfig(env["KUBECONFIG"], context, timeout=timeout)
    if context is None:
        pod = in_cluster(env, timeout=timeout)
        if pod is not None:
            return pod
    return from_kubeconfig(str(Path.home() / ".kube" / "config"), context, timeout=timeout)


def from_kubeconfig(
    files: str, context: str | None = None, *, timeout: float = DEFAULT_TIMEOUT
) -> Client:
    """The context ``context`` (default: the current one) of a kubeconfig.

    ``files`` is one path or a ``$KUBECONFIG``-style list (``os.pathsep``);
    relative paths inside are relative to their file, as kubectl reads them.
    """
    configuration = Configuration()
    try:
        context = context or _first_current_context(files)
        load_kube_config(config_file=files, context=context, client_configuration=configuration)
    except (ConfigException, OSError, yaml.YAMLError) as err:
        raise ConfigError(f"kubeconfig {files}: {err}") from err
    _trim_tokens(configuration)
    return Client(configuration, namespace=_namespace(files, context), timeout=timeout)


def _first_current_context(files: str) -> str | None:
    """kubectl's rule for a list: the first file that names a current context wins.

    The official merger lets the last one win, which would quietly point a
    ``$KUBECONFIG`` list at another cluster than kubectl's.
    """
    for name in files.split(os.pathsep):
        path = Path(name).expanduser()
        if name and path.is_file():
            document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if isinstance(document, dict) and document.get("current-context"):
                return str(document["current-context"])
    return None


def _trim_tokens(configuration: Any) -> None:
    """Strip the whitespace around a token, as kubectl does.

    The official loader sends a ``tokenFile``'s content as it is, and a
    token file usually ends with a newline, which no HTTP header may carry.
    Its refresh hook sets the token again before every request, so the trim
    wraps that hook.
    """
    official = configuration.refresh_api_key_hook

    def refresh(config: Any) -> None:
        if official is not None:
            official(config)
        if isinstance(config.api_key.get(BEARER), str):
            config.api_key[BEARER] = config.api_key[BEARER].strip()

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh


def _namespace(files: str, context: str | None) -> str | None:
    """The context's namespace, which the official loader reads but does not keep."""
    try:
        contexts, current = list_kube_config_contexts(config_file=files)
    except ConfigException:  # no current-context: the named context was loaded anyway
        return None
    chosen = context or current["name"]
    found: dict[str, Any] = next((c for c in contexts if c["name"] == chosen), {})
    namespace = (found.get("context") or {}).get("namespace")
    return str(namespace) if namespace else None


def in_cluster(
    env: Mapping[str, str] | None = None, *, timeout: float = DEFAULT_TIMEOUT
) -> Client | None:
    """The API server and ServiceAccount of this pod, or None when not in one."""
    env = os.environ if env is None else env
    server = _server(env)
    if server is None:
        return None
    sa_dir = Path(env.get(ENV_SA_DIR) or SERVICEACCOUNT_DIR)
    token = Path(env.get(ENV_TOKEN_FILE) or sa_dir / "token")
    ca = Path(env.get(ENV_CA_FILE) or sa_dir / "ca.crt")
    configuration = Configuration(host=server)
    if ca.is_file():
        configuration.ssl_ca_cert = str(ca)
    refresh = _bearer_from(token)
    refresh(configuration)
    configuration.refresh_api_key_hook = refresh
    return Client(configuration, namespace=_read(sa_dir / "namespace"), timeout=timeout)


def _server(env: Mapping[str, str]) -> str | None:
    url = env.get(ENV_API)
    if url:
        return url.rstrip("/")
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT") or "443"
    if not host:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _bearer_from(token_file: Path) -> Callable[[Any], None]:
    """A ``refresh_api_key_hook``: the token as the file says now (the last one if it is gone)."""

    def refresh(configuration: Any) -> None:
        token = _read(token_file)
        if token:
            configuration.api_key[BEARER] = f"Bearer {token}"

    return refresh
