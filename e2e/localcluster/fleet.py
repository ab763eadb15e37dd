"""The fake GPU fleet: a spec such as ``h100=4,a100=2,l40s=2`` -> KWOK-managed Node objects.

The operator discovers GPU types the way it will in a real cluster, from the
labels NVIDIA's GPU Feature Discovery writes and the ``nvidia.com/gpu``
capacity the device plugin reports; so the fake nodes carry exactly those.
A spec entry is ``<type>=<nodes>`` or ``<type>=<nodes>x<gpus per node>``.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# KWOK manages only nodes with this annotation (its --manage-nodes-with-annotation-selector).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
DEFAULT_SPEC = "h100=2,a100=2,l40s=2"


@dataclass(frozen=True)
class GpuType:
    """What GFD reports for one product; memory in MiB as GFD writes it."""

    product: str
    memory_mib: int
    family: str
    compute_major: int
    compute_minor: int
    gpus_per_node: int


CATALOG: Mapping[str, GpuType] = {
    "h100": GpuType("NVIDIA-H100-80GB-HBM3", 81559, "hopper", 9, 0, 8),
    "h200": GpuType("NVIDIA-H200", 143771, "hopper", 9, 0, 8),
    "a100": GpuType("NVIDIA-A100-SXM4-80GB", 81920, "ampere", 8, 0, 8),
    "l40s": GpuType("NVIDIA-L40S", 46068, "ada-lovelace", 8, 9, 4),
    "l4": GpuType("NVIDIA-L4", 23034, "ada-lovelace", 8, 9, 4),
    "a10g": GpuType("NVIDIA-A10G", 23028, "ampere", 8, 6, 4),
}


@dataclass(frozen=True)
class Pool:
    """``nodes`` nodes of one GPU type, each with ``gpus`` GPUs."""

    key: str
    gpu: GpuType
    nodes: int
    gpus: int


class FleetSpecError(ValueError):
    """A fleet spec that names an unknown type or a malformed count."""


def parse_fleet(spec: str) -> list[Pool]:
    """Parse ``h100=4,a100=2x4`` into pools, naming the entry that is wrong."""
    pools = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, count = entry.partition("=")
        key = key.strip().lower()
        if not sep or key not in CATALOG:
            known = ", ".join(sorted(CATALOG))
            raise FleetSpecError(f"fleet entry {entry!r}: want <type>=<nodes>, type one of {known}")
        gpu = CATALOG[key]
        nodes_text, _, gpus_text = count.partition("x")
        try:
            nodes = int(nodes_text)
            gpus = int(gpus_text) if gpus_text else gpu.gpus_per_node
        except ValueError:
            raise FleetSpecError(f"fleet entry {entry!r}: counts must be integers") from None
        if nodes < 1 or gpus < 1:
            raise FleetSpecError(f"fleet entry {entry!r}: counts must be at least 1")
        pools.append(Pool(key, gpu, nodes, gpus))
    if not pools:
        raise FleetSpecError("fleet spec is empty")
    return pools


def gfd_labels(pool: Pool) -> dict[str, str]:
    """The labels GPU Feature Discovery writes for a node of this pool."""
    gpu = pool.gpu
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gpu.product,
        "nvidia.com/gpu.count": str(pool.gpus),
        "nvidia.com/gpu.memory": str(gpu.memory_mib),
        "nvidia.com/gpu.family": gpu.family,
        "nvidia.com/gpu.compute.major": str(gpu.compute_major),
        "nvidia.com/gpu.compute.minor": str(gpu.compute_minor),
    }


def node_name(pool: Pool, index: int) -> str:
    return f"gpu-{pool.key}-{index}"


def node_manifest(pool: Pool, index: int) -> dict[str, Any]:
    """A Node with status in the create call: the API keeps it and KWOK then owns the node."""
    name = node_name(pool, index)
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(pool.gpus)}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node-role.kubernetes.io/gpu": "",
        "type": "kwok",
        **gfd_labels(pool),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict([KWOK_ANNOTATION])},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def fleet_manifests(pools: list[Pool]) -> list[dict[str, Any]]:
    return [node_manifest(pool, i) for pool in pools for i in range(pool.nodes)]


def ready(node: Mapping[str, Any]) -> bool:
    """The node's Ready condition is True (KWOK's node-initialize stage sets it)."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


LIFECYCLE_TAINT_PREFIX = "node.kubernetes.io/"
"""Taints the node lifecycle controller (and the kubelet) put on a node that is not yet,
or no longer, fit for pods: not-ready, unreachable, network-unavailable, ..."""


def schedulable(node: Mapping[str, Any]) -> bool:
    """Ready and free of lifecycle taints: what the scheduler needs, which is more than
    Ready. At 2,000 registering nodes the controller lifts the not-ready taints minutes
    after KWOK sets Ready, and a pod refused meanwhile can wait in the scheduler's
    unschedulable queue for its 5-minute flush (the fleet bench's first step did)."""
    taints = (node.get("spec") or {}).get("taints") or []
    tainted = any(str(t.get("key", "")).startswith(LIFECYCLE_TAINT_PREFIX) for t in taints)
    return ready(node) and not tainted
