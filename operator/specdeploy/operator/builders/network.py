"""The optional NetworkPolicy of one pool: only the named peers reach vLLM's ports.

The policy selects the pool's pods by their own labels and admits ingress to
the API port and the add-on's metrics port from ``spec.networkPolicy.allowFrom``
(default: the pods of the deployment's namespace). Egress stays open: vLLM
downloads models and resolves names. Enforcement is the CNI's; the local
cluster has none, so only the object's shape is checked there.
"""

from __future__ import annotations

from specdeploy.operator.api import NetworkPeer, NetworkPolicySpec
from specdeploy.operator.builders.common import SERVING, Manifest, Parent, metadata, parent_labels
from specdeploy.operator.builders.deployment import HTTP_PORT, METRICS_PORT


def _peer(peer: NetworkPeer) -> dict[str, object]:
    found: dict[str, object] = {}
    if peer.namespace_selector is not None:
        found["namespaceSelector"] = {"matchLabels": dict(peer.namespace_selector)}
    if peer.pod_selector is not None:
        found["podSelector"] = {"matchLabels": dict(peer.pod_selector)}
    return found


def pool_network_policy(
    parent: Parent, policy: NetworkPolicySpec, *, name: str, gpu_type: str
) -> Manifest:
    labels = parent_labels(parent, SERVING, gpu_type)
    peers = [_peer(p) for p in policy.allow_from] or [{"podSelector": {}}]
    ports = [{"protocol": "TCP", "port": port} for port in (HTTP_PORT, METRICS_PORT)]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(parent, name, labels),
        "spec": {
            "podSelector": {"matchLabels": labels},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": ports}],
        },
    }
