"""GPU types from the cluster's nodes, as GPU Feature Discovery labels them.

A node counts for GPU type T when its ``nvidia.com/gpu.product`` label is T,
it reports a positive ``nvidia.com/gpu`` capacity or allocatable (the device
plugin), and it matches the deployment's node selector. Either one is
enough: while the device plugin restarts the kubelet reports allocatable 0
for a moment with the capacity unchanged, and a pool (its Deployment and
table) must not be deleted for that (review H2). Readiness and cordoning are ignored on
purpose: a node in maintenance must not make a pool, and its Deployment,
disappear. Pure: nodes in, inventory out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.operator.api import GPU_PRODUCT_LABEL, GPU_RESOURCE


@dataclass(frozen=True)
class GpuNodes:
    """The nodes of one GPU type: how many, and the most GPUs any one of them has."""

    gpu_type: str
    nodes: int
    max_gpus_per_node: int
    total_gpus: int


def _count(status: Mapping[str, Any], field: str) -> int:
    value = (status.get(field) or {}).get(GPU_RESOURCE)
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


def _gpus(node: Mapping[str, Any]) -> int:
    """GPUs the node offers: allocatable, or capacity while allocatable reads 0 (a device
    plugin restarting); 0 when neither is readable or positive."""
    status = node.get("status") or {}
    return _count(status, "allocatable") or _count(status, "capacity")


def matches_selector(labels: Mapping[str, str], selector: Mapping[str, str] | None) -> bool:
    return all(labels.get(key) == value for key, value in (selector or {}).items())


def gpu_type_of(node: Mapping[str, Any]) -> str | None:
    """The node's GPU type, or None when it has no GPUs to offer."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    product = labels.get(GPU_PRODUCT_LABEL)
    return product if product and _gpus(node) > 0 else None


def gpu_inventory(
    nodes: Iterable[Mapping[str, Any]], node_selector: Mapping[str, str] | None = None
) -> dict[str, GpuNodes]:
    """GPU type -> its nodes, among the nodes the selector allows; sorted by type."""
    found: dict[str, list[int]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        gpu_type = gpu_type_of(node)
        if gpu_type is not None and matches_selector(labels, node_selector):
            found.setdefault(gpu_type, []).append(_gpus(node))
    return {
        t: GpuNodes(t, nodes=len(g), max_gpus_per_node=max(g), total_gpus=sum(g))
        for t, g in sorted(found.items())
    }


def node_signature(
    node: Mapping[str, Any], label_keys: Collection[str] | None = None
) -> tuple[str | None, int, tuple[tuple[str, str], ...]]:
    """What discovery reads from a node: a change here may change some deployment's pools.

    ``label_keys``: the labels some deployment's node selector names (None: all of
    them). The node controller, GFD and the kubelet patch other labels, hundreds a
    minute while a large fleet registers, and each would otherwise sweep every
    deployment for nothing (measured in the fleet bench: 2,000 nodes, issue 18).
    """
    labels = (node.get("metadata") or {}).get("labels") or {}
    kept = (
        labels.items()
        if label_keys is None
        else ((k, labels[k]) for k in label_keys if k in labels)
    )
    return gpu_type_of(node), _gpus(node), tuple(sorted(kept))


def selector_keys(specs: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The label keys the deployments' node selectors name (specs as the API holds them)."""
    return frozenset(key for spec in specs for key in (spec.get("nodeSelector") or {}))
