"""Labels, owner references and metadata shared by every child the operator creates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.operator.api import API_VERSION, DEPLOYMENT_KIND
from specdeploy.operator.naming import label_value

Manifest = dict[str, Any]

MANAGED_BY = ("app.kubernetes.io/managed-by", "specdeploy")
DEPLOYMENT_LABEL = "specdeploy.io/deployment"
POOL_LABEL = "specdeploy.io/pool"
COMPONENT_LABEL = "specdeploy.io/component"
PROFILE_LABEL = "specdeploy.io/profile"
CANARY_LABEL = "specdeploy.io/canary"
"""On the live floor's canary (a pool's one speculating replica while the rest run plain)."""
REFERENCE_LABEL = "specdeploy.io/plain-reference"
"""On the live floor's plain reference (one replica without speculation beside a speculating
pool whose evidence cannot tell it from plain decoding); scraped as
``specdeploy_plain_reference`` so the operator tells its latency from the pool's."""
APPLIED_HASH = "specdeploy.io/applied-hash"
"""Annotation: hash of the manifest last applied, so an unchanged child is never re-sent."""

SERVING = "serving"
PROFILING = "profiling"
TABLE = "table"


@dataclass(frozen=True)
class Parent:
    """The SpeculativeDeployment a child belongs to."""

    name: str
    namespace: str
    uid: str
    generation: int = 1

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Parent:
        meta = body["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            generation=int(meta.get("generation") or 1),
        )

    def owner_reference(self, *, controller: bool = True) -> dict[str, Any]:
        """An ownerReference: deleting the parent deletes the child (garbage collection)."""
        return {
            "apiVersion": API_VERSION,
            "kind": DEPLOYMENT_KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": controller,
            "blockOwnerDeletion": True,
        }


def parent_labels(parent: Parent, component: str, gpu_type: str | None = None) -> dict[str, str]:
    """Labels that select a parent's children (for watches, listing and Services)."""
    labels = {
        MANAGED_BY[0]: MANAGED_BY[1],
        DEPLOYMENT_LABEL: label_value(parent.name),
        COMPONENT_LABEL: component,
    }
    if gpu_type is not None:
        labels[POOL_LABEL] = label_value(gpu_type)
    return labels


def metadata(
    parent: Parent,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Metadata of a child owned (and controlled) by ``parent`` alone."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": parent.namespace,
        "labels": dict(labels),
        "ownerReferences": [parent.owner_reference()],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta
