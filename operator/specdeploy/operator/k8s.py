"""The only module that talks to the API server: gather and send, over the shared client.

The transport, credentials and ``ApiError`` are ``specdeploy.runtime.kubeapi``
(stdlib, shared with the local-cluster harness and the profiler); this module
re-exports what the operator names and adds what only the operator does.
Credentials come from a kubeconfig or the pod's ServiceAccount, the same
sources kopf logs in with.

``gather`` reads everything a decision needs into one ``Observed``;
``send`` sends planned requests. Tests replace the ``Api`` with a fake that
records requests; anything else would reach no network.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from specdeploy.operator import resources
from specdeploy.operator.api import KIND, PROFILE_KIND
from specdeploy.operator.builders.common import COMPONENT_LABEL, MANAGED_BY, PROFILING
from specdeploy.operator.observed import CHILD_KINDS, Observed
from specdeploy.operator.plan import Request
from specdeploy.runtime.kubeapi import (
    SERVICEACCOUNT_DIR,
    ApiError,
    Client,
    Credentials,
    get_or_none,
    in_cluster,
)

__all__ = [
    "Api",
    "ApiError",
    "Client",
    "Credentials",
    "RetryLater",
    "credentials_from_kubeconfig",
    "credentials_in_cluster",
    "find_credentials",
    "gather",
    "get_or_none",
    "list_deployments",
    "list_items",
    "owners_of",
    "send",
]

Obj = dict[str, Any]
MANAGED_SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"


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


def credentials_from_kubeconfig(path: Path) -> Credentials:
    """The current context of a kubeconfig (file paths or inline base64 data)."""
    return Credentials.from_kubeconfig(path)


def credentials_in_cluster() -> Credentials | None:
    """The pod's ServiceAccount, when one is mounted (its token file is there)."""
    if not (SERVICEACCOUNT_DIR / "token").exists():
        return None
    env = {"KUBERNETES_SERVICE_HOST": "kubernetes.default.svc", **os.environ}
    return in_cluster(env)


def find_credentials() -> Credentials:
    """$KUBECONFIG, else the pod's ServiceAccount, else ~/.kube/config."""
    explicit = os.environ.get("KUBECONFIG")
    if explicit:
        return credentials_from_kubeconfig(Path(explicit.split(os.pathsep)[0]))
    pod = credentials_in_cluster()
    if pod is not None:
        return pod
    return credentials_from_kubeconfig(Path.home() / ".kube" / "config")


# --- reading -------------------------------------------------------------


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
