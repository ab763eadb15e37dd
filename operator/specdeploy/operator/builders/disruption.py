"""The PodDisruptionBudget of one pool: a node drain takes its replicas one at a time.

``maxUnavailable: 1`` rather than a ``minAvailable``: with one replica a
``minAvailable: 1`` would block every voluntary drain of its node for good,
while one at a time still keeps a drain from taking a whole pool down at once
(review M8). The selector is the pool's pods' own labels.
"""

from __future__ import annotations

from specdeploy.operator.builders.common import SERVING, Manifest, Parent, metadata, parent_labels


def pool_disruption_budget(parent: Parent, *, name: str, gpu_type: str) -> Manifest:
    labels = parent_labels(parent, SERVING, gpu_type)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(parent, name, labels),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }
