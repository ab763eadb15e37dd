"""The watched objects, kept in memory from kopf's watch events (issue #18, review M10).

Before, every reconcile listed all Nodes of the cluster and each kind of child
in the namespace: 15 requests per reconcile, so a resync of 500
deployments on 2,000 nodes cost 7,500 requests and moved every node body each
time. The operator already streams all of these objects (kopf's watches,
narrowed on the server to the managed-by label), so it keeps what they say:
``gather`` reads nodes, children (HPAs among them) and profiles from here, and
asks the API server only for what no watch sees: KEDA's ScaledObjects (their
API may come and go) and the profiling pods while a Job has not succeeded;
and the deployment itself when an event asked for the reconcile (a fresh
read). A reconcile no event asked for (the resync, a telemetry interval)
reads the deployment from here too, once this view holds the operator's own
last status write to it (``Reconciler._awaiting``): before it, a decision from
an older view would repeat that write's transitions. An idle reconcile sends
no request (one LIST with KEDA installed).

Consistency, the informer way: a kind is *synced* once one LIST of it has
filled the cache; until then ``items`` answers None and the caller lists (one
LIST per kind, the first reconcile pays it). Every event then updates the
entry. The resync re-lists each kind (``refresh``: one request per kind, not
per deployment), which repairs anything a broken watch missed: the LIST
replaces the contents, except for objects an event touched while the LIST was
in flight, whose event is newer. A view one event behind is what any
informer gives; a write decided from it is refused as stale (409, a failed
JSON-patch test) or is an idempotent apply, and the event that follows
reconciles again.

Memory: ``metadata.managedFields`` (the largest part of an applied object, and
read by nothing here) is dropped, and nodes keep only what discovery reads.
Reconciles run in threads and events on the event loop, so every access holds
one lock; readers get copies of the containers (the bodies are never mutated).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from specdeploy.operator.api import GPU_RESOURCE
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.client import ApiError

Obj = dict[str, Any]
Key = tuple[str | None, str]
"""(namespace or None for cluster-scoped, name)."""
PAGE = 500
"""Items per LIST page: a 2,000-node list comes in four answers, not one of many MB."""


def slim(kind: str, body: Mapping[str, Any]) -> Obj:
    """What the operator reads of ``body``: nodes reduced to name, labels and GPU counts
    (discovery's inputs); other kinds without ``managedFields``."""
    meta = dict(body.get("metadata") or {})
    meta.pop("managedFields", None)
    if kind != "Node":
        return {**body, "metadata": meta}
    status = body.get("status") or {}
    counts = {
        field: {GPU_RESOURCE: (status.get(field) or {})[GPU_RESOURCE]}
        for field in ("capacity", "allocatable")
        if GPU_RESOURCE in (status.get(field) or {})
    }
    kept = {k: meta[k] for k in ("name", "labels", "resourceVersion") if k in meta}
    return {"kind": "Node", "metadata": kept, "status": counts}


def list_pages(api: Any, path: str, selector: str | None = None, *, page: int = PAGE) -> list[Obj]:
    """Every item of a collection, ``page`` at a time (``limit`` and ``continue``)."""
    items: list[Obj] = []
    token = ""
    while True:
        query = [("limit", str(page))]
        if selector:
            query.append(("labelSelector", selector))
        if token:
            query.append(("continue", token))
        answer = api.request("GET", path, query=tuple(query))
        items.extend(answer.get("items") or [])
        token = str((answer.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


class WatchCache:
    """Objects of the watched kinds by kind, then (namespace, name); see the module doc.

    ``selectors``: kind -> the label selector its watch and LIST use (None: all).
    ``namespaces``: the watched ones (empty: the whole cluster); cluster-scoped
    kinds are listed cluster-wide either way. ``optional``: kinds whose API a
    cluster may not serve; a 404 on their LIST syncs them as empty.
    """

    def __init__(
        self,
        selectors: Mapping[str, str | None],
        *,
        namespaces: Iterable[str] = (),
        optional: Iterable[str] = (),
    ) -> None:
        self._selectors = dict(selectors)
        self._namespaces = tuple(namespaces)
        self._optional = frozenset(optional)
        self._lock = threading.Lock()
        self._listing = {kind: threading.Lock() for kind in self._selectors}
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._touched: dict[str, dict[Key, Obj | None]] = {}
        """Per kind being listed: what events said meanwhile (None: deleted)."""
        self._absent: set[str] = set()
        """Optional kinds (not kept here) whose API answered 404: not asked again until
        ``refresh_all`` (without KEDA, every reconcile cost one 404 for ScaledObjects)."""

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._selectors)

    def synced(self, kind: str) -> bool:
        with self._lock:
            return kind in self._objects

    def observe(self, kind: str, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """One watch event's object: stored, or removed when ``deleted``."""
        if kind not in self._selectors:
            return
        meta = body.get("metadata") or {}
        key: Key = (meta.get("namespace"), str(meta.get("name")))
        value = None if deleted else slim(kind, body)
        with self._lock:
            if kind in self._touched:
                self._touched[kind][key] = value
            store = self._objects.get(kind)
            if store is None:
                return  # not synced: the LIST to come has it
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One kept object (None: not kept, or not synced)."""
        with self._lock:
            return (self._objects.get(kind) or {}).get((namespace, name))

    def items(self, kind: str, namespace: str | None = None) -> list[Obj] | None:
        """The kind's objects (of ``namespace``; None: all), or None while not synced."""
        with self._lock:
            store = self._objects.get(kind)
            if store is None:
                return None
            return [o for (ns, _), o in store.items() if namespace is None or ns == namespace]

    def items_or_list(self, api: Any, kind: str, namespace: str | None = None) -> list[Obj]:
        """``items``, listing the kind first if it is not synced yet (the first reconcile)."""
        found = self.items(kind, namespace)
        if found is None:
            self.refresh(api, kind)
            found = self.items(kind, namespace) or []
        return found

    def refresh(self, api: Any, kind: str) -> None:
        """Re-list ``kind`` and replace what is kept, keeping events newer than the LIST.

        Raises what the API raised (the caller retries); the cache is then unchanged.
        """
        with self._listing[kind]:
            with self._lock:
                self._touched[kind] = {}
            try:
                listed = self._list(api, kind)
            except BaseException:
                with self._lock:
                    self._touched.pop(kind, None)
                raise
            with self._lock:
                fresh: dict[Key, Obj] = {}
                for body in listed:
                    meta = body.get("metadata") or {}
                    fresh[(meta.get("namespace"), str(meta.get("name")))] = slim(kind, body)
                for key, value in self._touched.pop(kind).items():
                    if value is None:
                        fresh.pop(key, None)
                    else:
                        fresh[key] = value
                self._objects[kind] = fresh

    def refresh_all(self, api: Any) -> None:
        """Re-list every kind kept (the resync's repair) and forget the absent APIs."""
        with self._lock:
            self._absent.clear()
        for kind in self._selectors:
            self.refresh(api, kind)

    def absent(self, kind: str) -> bool:
        """Whether ``kind``'s API answered 404 since the last ``refresh_all``."""
        with self._lock:
            return kind in self._absent

    def mark_absent(self, kind: str) -> None:
        with self._lock:
            self._absent.add(kind)

    def wrote(self, path: str) -> None:
        """A write to ``path`` was accepted: its kind's API is served after all (KEDA was
        installed since the 404), so it is listed again from the next reconcile on; else a
        ScaledObject made now would stay unseen, and unpruned, until the resync."""
        segments = path.split("/")
        with self._lock:
            self._absent = {k for k in self._absent if paths.kind_of(k).plural not in segments}

    def _list(self, api: Any, kind: str) -> list[Obj]:
        selector = self._selectors[kind]
        scopes: tuple[str | None, ...] = (
            self._namespaces if self._namespaces and paths.kind_of(kind).namespaced else (None,)
        )
        found: list[Obj] = []
        for scope in scopes:
            try:
                found.extend(list_pages(api, paths.path(kind, scope), selector))
            except ApiError as err:
                if kind in self._optional and err.status == 404:
                    continue  # the API is not served: nothing of it exists
                raise
        return found
