"""``specdeploy dev url``: a SpeculativeDeployment's Service as the host reaches it.

The base URL goes through the cluster's gateway (``gateway.py``); it is
printed only once ``/v1/models`` answers through it, so a script can use it
straight away (``--wait`` gives the pods time to become ready).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from e2e.localcluster.gateway import base_url
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.layout import Layout, State
from specdeploy.operator.naming import service_name
from specdeploy.runtime.kube import paths

POLL_SECONDS = 0.5


class NotReachable(RuntimeError):
    """The deployment, its Service or a ready endpoint is missing (the message says which)."""


def find(workdir: Path, namespace: str, name: str, *, wait: float = 0.0) -> str:
    """The base URL of ``namespace/name``'s Service, once it answers (within ``wait`` s)."""
    layout = Layout(workdir.resolve())
    if not layout.state.is_file():
        raise NotReachable(f"no cluster in {layout.root} (run specdeploy dev up)")
    state = State.load(layout.state)
    if not state.ports.gateway:
        raise NotReachable("this cluster was started without the gateway: restart it")
    api = KubeApi.from_kubeconfig(layout.kubeconfig())
    try:
        api.get(paths.path("SpeculativeDeployment", namespace=namespace, name=name))
    except ApiError as err:
        raise NotReachable(f"SpeculativeDeployment {namespace}/{name}: {err}") from None
    url = base_url(state.ports.gateway, namespace, service_name(name))
    deadline = time.monotonic() + wait
    while True:
        problem = _probe(url)
        if problem is None:
            return url
        if time.monotonic() >= deadline:
            raise NotReachable(f"{url} does not answer: {problem}")
        time.sleep(POLL_SECONDS)


def _probe(url: str) -> str | None:
    """None when ``/v1/models`` answers 200 through the gateway, else why not."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as response:
            json.loads(response.read())
            return None
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace")[:300]
        return f"HTTP {err.code}: {body}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        return str(err)
