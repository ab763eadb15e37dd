"""Which pools a deployment has: the ones its spec lists, or one per discovered GPU type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specdeploy.operator.api import PoolDefaults, SpeculativeDeploymentSpec
from specdeploy.operator.discovery import GpuNodes


@dataclass(frozen=True)
class Pool:
    """One pool to run: its GPU type and shape, and the nodes found for it (maybe none)."""

    gpu_type: str
    gpus_per_replica: int
    replicas: int
    max_replicas: int
    nodes: GpuNodes | None

    def placement_problem(self) -> str | None:
        """Why no replica can be placed, when nodes exist but none is big enough.

        No node at all is not a problem here: a cluster autoscaler adds nodes
        for pending pods, so the pool's children are created and wait.
        """
        if self.nodes is not None and self.nodes.max_gpus_per_node < self.gpus_per_replica:
            return (
                f"gpusPerReplica={self.gpus_per_replica} but nodes with GPU type "
                f"{self.gpu_type} have at most {self.nodes.max_gpus_per_node} GPUs"
            )
        return None


def _pool(gpu_type: str, shape: PoolDefaults, nodes: GpuNodes | None) -> Pool:
    low = shape.replicas.min
    high = shape.replicas.max if shape.replicas.max is not None else low
    return Pool(gpu_type, shape.gpus_per_replica, low, high, nodes)


def plan_pools(spec: SpeculativeDeploymentSpec, inventory: Mapping[str, GpuNodes]) -> list[Pool]:
    """The spec's pools in order, else one per discovered GPU type (sorted)."""
    if spec.pools is not None:
        return [_pool(p.gpu_type, p, inventory.get(p.gpu_type)) for p in spec.pools]
    return [_pool(t, spec.pool_defaults, nodes) for t, nodes in sorted(inventory.items())]
