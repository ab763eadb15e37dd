"""The scaler of one pool in ``hpa`` or ``keda`` mode: an HPA, or a KEDA ScaledObject.

Both scale the pool's own Deployment through its scale subresource (a stable
name, ``<deployment>-<gpu>``), which is the part Dynamo gives a separate
scaling-adapter object; here the pool's Deployment already is one, and the
operator leaves its ``replicas`` out of what it applies, so the scaler owns
the field. Neither scaler measures anything itself: the metric is the
operator's own ``specdeploy_operator_pool_wanted_replicas`` (the capacity model's
count for the pool, within its bounds and GPUs), so all three modes size a
pool the same way and differ only in who applies the count and how it is
stabilised. With an ``AverageValue`` target of 1 both compute
``ceil(wanted / 1)``: the HPA for an Object metric divides the value by the
target, KEDA's Prometheus trigger the same through the HPA it creates.
"""

from __future__ import annotations

from typing import Any

from specdeploy.operator.api import AutoscalingSpec
from specdeploy.operator.builders.common import SERVING, Manifest, Parent, metadata, parent_labels

WANTED_REPLICAS_METRIC = "specdeploy_operator_pool_wanted_replicas"
"""The operator's gauge (``metrics.OperatorMetrics``); labels ``specdeploy_namespace`` and
``deployment`` (the pool's Deployment), which prometheus-adapter maps to the objects."""


def _target(name: str) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}


def _behavior(spec: AutoscalingSpec) -> dict[str, Any]:
    return {
        "scaleUp": {"stabilizationWindowSeconds": spec.scale_up_window_seconds},
        "scaleDown": {"stabilizationWindowSeconds": spec.scale_down_window_seconds},
    }


def wanted_replicas_query(namespace: str, deployment: str) -> str:
    """The PromQL of a pool's wanted count (KEDA's trigger; the adapter rule's equivalent)."""
    return (
        f'max({WANTED_REPLICAS_METRIC}{{specdeploy_namespace="{namespace}", '
        f'deployment="{deployment}"}})'
    )


def pool_hpa(
    parent: Parent,
    spec: AutoscalingSpec,
    *,
    name: str,
    gpu_type: str,
    min_replicas: int,
    max_replicas: int,
) -> Manifest:
    """An ``autoscaling/v2`` HPA on the custom metric, served by prometheus-adapter."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(parent, name, parent_labels(parent, SERVING, gpu_type)),
        "spec": {
            "scaleTargetRef": _target(name),
            # the HPA cannot go below 1 (scale to zero is an alpha gate); validation says so
            "minReplicas": max(min_replicas, 1),
            "maxReplicas": max(max_replicas, min_replicas, 1),
            "metrics": [
                {
                    "type": "Object",
                    "object": {
                        "describedObject": _target(name),
                        "metric": {"name": WANTED_REPLICAS_METRIC},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            "behavior": _behavior(spec),
        },
    }


def pool_scaled_object(
    parent: Parent,
    spec: AutoscalingSpec,
    *,
    name: str,
    gpu_type: str,
    min_replicas: int,
    max_replicas: int,
    prometheus_url: str,
) -> Manifest:
    """A KEDA ScaledObject with a Prometheus trigger on the same metric (KEDA makes the HPA)."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(parent, name, parent_labels(parent, SERVING, gpu_type)),
        "spec": {
            "scaleTargetRef": _target(name),
            "minReplicaCount": min_replicas,
            "maxReplicaCount": max(max_replicas, min_replicas),
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(spec)}},
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": wanted_replicas_query(parent.namespace, name),
                        "threshold": "1",
                    },
                }
            ],
        },
    }


__all__ = ["WANTED_REPLICAS_METRIC", "pool_hpa", "pool_scaled_object", "wanted_replicas_query"]
