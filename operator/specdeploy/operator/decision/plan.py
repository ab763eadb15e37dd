"""From a Decision and the observed state to the exact API requests, as plain values.

Nothing is sent here: ``k8s.send`` does that. Keeping the requests as values
makes "a reconcile with nothing to change writes nothing" a property of a
pure function (``plan`` returns an empty list), testable without a cluster.

* Owned children are sent with server-side apply (field manager
  ``specdeploy``) only when ``manifests.needs_apply`` says so.
* Shared children (profiling Jobs and their RBAC) are created once, owned by
  the deployment that created them; other deployments that need them add
  themselves as (non-controller) owners with a JSON patch guarded by the
  object's resourceVersion; a deployment that no longer needs one removes
  its reference the same way, or deletes the object when it was the last owner.
  Garbage collection deletes a shared child once all its owners are gone.
* Status is a merge patch of the difference, sent only when it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specdeploy.operator.api import API_VERSION, DEPLOYMENT_KIND
from specdeploy.operator.builders.common import Parent
from specdeploy.operator.decision.decide import Decision
from specdeploy.operator.decision.status import EventSpec
from specdeploy.operator.manifests import Ref, merge_patch, needs_apply, ref_of
from specdeploy.operator.observed import OWNED_KINDS, SHARED_KINDS, Observed, owner_uids
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import APPLY_PATCH as APPLY
from specdeploy.runtime.kube.requests import JSON_PATCH, Request
from specdeploy.runtime.kube.requests import MERGE_PATCH as MERGE

FIELD_MANAGER = "specdeploy"
COMPONENT = "specdeploy-operator"


# --- owned children --------------------------------------------------------


def _apply(manifest: Mapping[str, Any]) -> Request:
    kind, name = ref_of(manifest)
    return Request(
        "PATCH",
        paths.object_path(manifest),
        f"apply {kind} {name}",
        body=manifest,
        content_type=APPLY,
        query=(("fieldManager", FIELD_MANAGER), ("force", "true")),
    )


def _delete(obj: Mapping[str, Any], *, why: str) -> Request:
    meta = obj["metadata"]
    kind = str(obj.get("kind"))
    body = {
        "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        "propagationPolicy": "Background",
    }
    return Request(
        "DELETE",
        paths.path(kind, meta.get("namespace"), meta["name"]),
        f"delete {kind} {meta['name']} ({why})",
        body={k: v for k, v in body.items() if v is not None},
        ok=(404, 409),
    )


def _owned_writes(parent: Parent, decision: Decision, observed: Observed) -> list[Request]:
    wanted = {ref_of(m) for m in decision.owned} | set(decision.keep)
    requests = [_apply(m) for m in decision.owned if needs_apply(m, observed.child(*ref_of(m)))]
    for kind in OWNED_KINDS:
        for name, obj in sorted(observed.children.get(kind, {}).items()):
            if (kind, name) not in wanted and parent.uid in owner_uids(obj):
                requests.append(_delete({"kind": kind, **obj}, why="no longer wanted"))
    return requests


# --- shared children -------------------------------------------------------


def _create_shared(parent: Parent, manifest: Mapping[str, Any]) -> Request:
    meta = {**manifest["metadata"], "ownerReferences": [parent.owner_reference()]}
    kind, name = ref_of(manifest)
    return Request(
        "POST",
        paths.path(kind, meta.get("namespace")),
        f"create {kind} {name}",
        body={**manifest, "metadata": meta},
        ok=(409,),
    )


def _guarded_patch(obj: Mapping[str, Any], ops: list[dict[str, Any]], what: str) -> Request:
    meta = obj["metadata"]
    guard = {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
    return Request(
        "PATCH",
        paths.path(str(obj["kind"]), meta.get("namespace"), meta["name"]),
        what,
        body=[guard, *ops],
        content_type=JSON_PATCH,
    )


def _join_shared(
    parent: Parent, manifest: Mapping[str, Any], existing: Mapping[str, Any]
) -> list[Request]:
    """Add this deployment as an owner, and fix the fields others may have changed."""
    obj = {"kind": manifest["kind"], **existing}
    kind, name = ref_of(manifest)
    ops: list[dict[str, Any]] = []
    refs = existing["metadata"].get("ownerReferences")
    if parent.uid not in owner_uids(existing):
        ref = parent.owner_reference(controller=False)
        ops.append(
            {"op": "add", "path": "/metadata/ownerReferences/-", "value": ref}
            if refs
            else {"op": "add", "path": "/metadata/ownerReferences", "value": [ref]}
        )
    for key in ("rules", "subjects"):
        if key in manifest and existing.get(key) != manifest[key]:
            ops.append({"op": "add", "path": f"/{key}", "value": manifest[key]})
    return [_guarded_patch(obj, ops, f"share {kind} {name}")] if ops else []


def _leave_shared(parent: Parent, kind: str, obj: Mapping[str, Any]) -> Request:
    """Drop this deployment's owner reference; the last owner deletes the object."""
    full = {"kind": kind, **obj}
    uids = owner_uids(obj)
    if uids == [parent.uid]:
        return _delete(full, why="no deployment needs it any more")
    index = uids.index(parent.uid)
    ops = [
        {"op": "test", "path": f"/metadata/ownerReferences/{index}/uid", "value": parent.uid},
        {"op": "remove", "path": f"/metadata/ownerReferences/{index}"},
    ]
    return _guarded_patch(full, ops, f"release {kind} {obj['metadata']['name']}")


def _shared_writes(parent: Parent, decision: Decision, observed: Observed) -> list[Request]:
    requests: list[Request] = []
    wanted: set[Ref] = set()
    for manifest in decision.shared:
        ref = ref_of(manifest)
        wanted.add(ref)
        existing = observed.child(*ref)
        if existing is None:
            requests.append(_create_shared(parent, manifest))
        else:
            requests.extend(_join_shared(parent, manifest, existing))
    for kind in SHARED_KINDS:
        for name, obj in sorted(observed.children.get(kind, {}).items()):
            unwanted = (kind, name) not in wanted and (kind, name) not in decision.keep
            if unwanted and parent.uid in owner_uids(obj):
                requests.append(_leave_shared(parent, kind, obj))
    return requests


# --- status and events -----------------------------------------------------


def status_write(body: Mapping[str, Any], status: Mapping[str, Any]) -> list[Request]:
    old = body.get("status") or {}
    if old == status:
        return []
    meta = body["metadata"]
    return [
        Request(
            "PATCH",
            paths.path(DEPLOYMENT_KIND, meta["namespace"], meta["name"], "status"),
            f"status of {meta['name']}: {status.get('phase')}",
            body={"status": merge_patch(old, status)},
            content_type=MERGE,
        )
    ]


def event_write(parent: Parent, event: EventSpec, *, now: str) -> Request:
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{parent.name[:200]}.", "namespace": parent.namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": DEPLOYMENT_KIND,
            "name": parent.name,
            "namespace": parent.namespace,
            "uid": parent.uid,
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    return Request(
        "POST", paths.path("Event", parent.namespace), f"event {event.reason}", body=body
    )


def plan_children(body: Mapping[str, Any], decision: Decision, observed: Observed) -> list[Request]:
    """Requests that make the children match the decision (empty when they do)."""
    parent = Parent.of(body)
    return _owned_writes(parent, decision, observed) + _shared_writes(parent, decision, observed)


def plan(
    body: Mapping[str, Any], decision: Decision, observed: Observed, *, now: str
) -> list[Request]:
    """Every request of one reconcile: children first, then status, then events."""
    parent = Parent.of(body)
    return [
        *plan_children(body, decision, observed),
        *status_write(body, decision.status),
        *(event_write(parent, e, now=now) for e in decision.events),
    ]
