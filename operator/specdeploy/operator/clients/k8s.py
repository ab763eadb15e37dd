"""The only module of the operator that talks to the API server: gather and send.

The client is ``specdeploy.runtime.kube`` (the official ``kubernetes``
client behind a typed wrapper, shared with the profiler and the
local-cluster harness); this module re-exports what the operator names and
adds the operator's own verbs. ``connect`` finds the cluster as kubectl
does (an explicit kubeconfig and context, ``$KUBECONFIG``, the pod's
ServiceAccount, ``~/.kube/config``); kopf's watches log in with the same
client's credentials (``handlers.register_login``).

``gather`` reads everything a decision needs into one ``Observed``;
``send`` sends planned requests. Tests replace the ``Api`` with a fake that
records requests; anything else would reach no network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from specdeploy.operator.api import DEPLOYMENT_KIND, PROFILE_KIND
from specdeploy.operator.builders.common import COMPONENT_LABEL, MANAGED_BY, PROFILING
from specdeploy.operator.clients.watch_cache import WatchCache
from specdeploy.operator.observed import (
    CHILD_KINDS,
    OPTIONAL_KINDS,
    JobPhase,
    Observed,
    job_state,
)
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.client import (
    TRANSPORT_ERRORS,
    ApiError,
    Client,
    Credentials,
    get_or_none,
)
from specdeploy.runtime.kube.config import connect
from specdeploy.runtime.kube.requests import Request

__all__ = [
    "API_ERRORS",
    "TRANSPORT_ERRORS",
    "Api",
    "ApiError",
    "ChildrenRefused",
    "Client",
    "Credentials",
    "RetryLater",
    "connect",
    "gather",
    "get_or_none",
    "list_deployments",
    "list_items",
    "owners_of",
    "send",
    "send_each",
]

Obj = dict[str, Any]
API_ERRORS: tuple[type[Exception], ...] = (ApiError, *TRANSPORT_ERRORS)
"""A refusal or no answer at all: whatever made the request is tried again later."""
MANAGED_SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"


class Api(Protocol):
    """What the operator needs from a client: one JSON request (a ``Client``, or a fake)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Sequence[tuple[str, str]] = (),
    ) -> Obj: ...


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


def _read(
    api: Api, cache: WatchCache | None, kind: str, namespace: str | None, selector: str | None
) -> list[Obj]:
    """Objects of ``kind`` (in ``namespace``): from the watches' cache when it keeps the
    kind, else listed; none of an optional API not served (its 404 remembered)."""
    if cache is not None and kind in cache.kinds:
        return cache.items_or_list(api, kind, namespace)
    if cache is not None and cache.absent(kind):
        return []
    try:
        return list_items(api, paths.path(kind, namespace), selector)
    except ApiError as err:
        if kind in OPTIONAL_KINDS and err.status == 404:
            if cache is not None:
                cache.mark_absent(kind)  # asked again after the next resync
            return []  # KEDA not installed: nothing of it can exist
        raise


def gather(
    api: Api,
    namespace: str,
    name: str,
    *,
    cache: WatchCache | None = None,
    cached_body: bool = False,
) -> tuple[Obj | None, Observed]:
    """The deployment (None when gone) and everything its decision reads.

    ``cache``: the watches' view (``watch_cache``); the kinds it keeps are read
    from it, not listed (without one, every kind is listed, as tests and the
    CLI's one-shot reconcile do). ``cached_body``: the deployment too, when the
    cache has it (the caller knows that view holds the operator's own last write
    to it); else it is read fresh, as an event's reconcile does.
    """
    body = (
        cache.get(DEPLOYMENT_KIND, namespace, name) if cache is not None and cached_body else None
    )
    if body is None:
        body = get_or_none(api, paths.path(DEPLOYMENT_KIND, namespace, name))
    if body is None:
        return None, Observed()
    children = {
        kind: _by_name(_read(api, cache, kind, namespace, MANAGED_SELECTOR), kind)
        for kind in CHILD_KINDS
    }
    profiling_pods = f"{MANAGED_SELECTOR},{COMPONENT_LABEL}={PROFILING}"
    nodes = _read(api, cache, "Node", None, None)
    profiles = _read(api, cache, PROFILE_KIND, namespace, None)
    observed = Observed(
        nodes=nodes,
        profiles=_by_name(profiles, PROFILE_KIND),
        children=children,
        job_pods=_pods_by_job(
            list_items(api, paths.path("Pod", namespace), profiling_pods)
            if cache is None or _profiling_unfinished(children.get("Job", {}).values())
            else []
        ),
    )
    return body, observed


def _profiling_unfinished(jobs: Iterable[Obj]) -> bool:
    """Whether a Job of the namespace has not succeeded: only then are its pods read (why
    one is stuck or failed, ``observed.job_state``); a settled namespace lists no pods."""
    return any(job_state(job).phase is not JobPhase.SUCCEEDED for job in jobs)


def unlisted(
    api: Api, namespace: str, refs: Iterable[tuple[str, str]]
) -> dict[str, dict[str, Obj]]:
    """Objects with the names of ``refs`` that exist without the managed-by label.

    ``gather`` lists children by the operator's label, so an unlabelled object
    with a wanted name is invisible to it, and a server-side apply would take it
    over (review M4). Asked only for wanted children ``gather`` did not see: one
    GET each, on creation.
    """
    found: dict[str, dict[str, Obj]] = {}
    for kind, name in refs:
        obj = get_or_none(api, paths.path(kind, namespace, name))
        if obj is not None:
            found.setdefault(kind, {})[name] = {"kind": kind, **obj}
    return found


def list_deployments(api: Api, namespace: str | None = None) -> list[tuple[str, str]]:
    """(namespace, name) of every SpeculativeDeployment (in one namespace, or all)."""
    items = list_items(api, paths.path(DEPLOYMENT_KIND, namespace))
    return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items]


# --- writing -------------------------------------------------------------


class RetryLater(Exception):
    """Someone else changed an object between our read and our write: decide again."""


REFUSED_STATUSES = frozenset({400, 403, 404, 422})
"""The API server refused this one write on its merits (invalid, forbidden, gone): the
others of the reconcile still go, and the deployment's status says which was refused."""


class ChildrenRefused(Exception):
    """Some children were refused; the status says so, the reconcile retries with backoff."""

    def __init__(self, refused: list[tuple[Request, ApiError]]) -> None:
        self.refused = refused
        super().__init__("; ".join(f"{r.what}: {e.status}" for r, e in refused))


def send_each(api: Api, requests: Iterable[Request]) -> list[tuple[Request, ApiError]]:
    """Send every request; the ones the API server refused on their merits (review H4).

    A stale view (a conflict, a failed JSON-patch test) raises RetryLater at once, and a
    server or transport failure raises too: those say nothing about one write alone.
    """
    refused: list[tuple[Request, ApiError]] = []
    for req in requests:
        try:
            send(api, [req])
        except ApiError as err:
            if err.status not in REFUSED_STATUSES:
                raise
            refused.append((req, err))
    return refused


def send(api: Api, requests: Iterable[Request], answers: list[Obj] | None = None) -> int:
    """Send each request in order; return how many were sent (their answers appended to
    ``answers`` when given).

    A status listed in ``ok`` is success ("already so"). A conflict or a
    failed JSON-patch test means our view was stale: RetryLater.
    """
    sent = 0
    for req in requests:
        sent += 1
        try:
            answer = api.request(
                req.method, req.path, body=req.body, content_type=req.content_type, query=req.query
            )
            if answers is not None:
                answers.append(answer)
        except ApiError as err:
            if err.status == 409 and req.method == "POST" and 409 in req.ok:
                # Made meanwhile by another (a deployment of the same fingerprint, in a
                # race): what it is - ours to join, or someone else's - is for a fresh
                # decision; counted as done, it was never joined (review M4, H1).
                raise RetryLater(f"{req.what}: created meanwhile; deciding again") from err
            if err.status in req.ok:
                continue
            if err.status in (409, 422) and req.method == "PATCH" and isinstance(req.body, list):
                raise RetryLater(str(err)) from err
            raise
    return sent


def owners_of(obj: Mapping[str, Any]) -> list[str]:
    """Names of the SpeculativeDeployments listed as owners of ``obj``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [str(r["name"]) for r in refs if r.get("kind") == DEPLOYMENT_KIND]
