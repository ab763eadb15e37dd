"""prometheus-adapter's rules for the operator's autoscaling metric (``autoscaling.mode: hpa``).

In ``hpa`` mode the capacity model still decides: the operator exports, per
pool, the replicas it wants, and an ``autoscaling/v2`` HPA reads that number
back through ``custom.metrics.k8s.io`` as an *Object* metric on the pool's
Deployment with an ``AverageValue`` target of 1. The HPA's arithmetic is then
``ceil(value / 1)``: the HPA controller owns ``replicas`` (and its
stabilisation, its events, its status) while the number comes from the tables.

The metric contract (the operator's ``/metrics``):

* ``specdeploy_operator_pool_wanted_replicas``, a gauge (``builders.scaler``
  names it, ``operator.metrics`` exports it; the issue's brief called it
  ``specdeploy_pool_wanted_replicas`` before the operator's ``specdeploy_operator_``
  prefix was applied);
* ``specdeploy_namespace``: the SpeculativeDeployment's namespace (the
  operator's own ``namespace`` label is where the operator runs);
* ``deployment``: the pool's apps/v1 Deployment name;
* value: the replicas the capacity model wants.

prometheus-adapter turns a rule into an API resource by mapping series labels
to Kubernetes resources: here ``specdeploy_namespace`` to the namespace and
``deployment`` to ``deployments.apps``. The query takes the ``max`` across
series, because while two operator replicas hand over leadership both may
export a value for a short while, and scaling to the larger is the safe side.

Pure data: the chart renders it into the adapter's ConfigMap and the local
cluster's harness writes it as the adapter's ``--config``.
"""

from __future__ import annotations

from typing import Any

from specdeploy.operator.builders.scaler import WANTED_REPLICAS_METRIC

__all__ = ["DEPLOYMENT_LABEL", "METRIC", "METRICS_QUERY", "NAMESPACE_LABEL", "adapter_rules"]

METRIC = WANTED_REPLICAS_METRIC
"""The operator's gauge and the custom metric's name in ``custom.metrics.k8s.io`` (the one
name the operator's HPA asks for)."""
NAMESPACE_LABEL = "specdeploy_namespace"
DEPLOYMENT_LABEL = "deployment"
METRICS_QUERY = "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
"""The adapter's Go template: ``LabelMatchers`` selects the object, ``GroupBy`` is its label."""


def adapter_rules() -> dict[str, Any]:
    """The adapter's configuration document (its ``--config`` file), one rule."""
    return {
        "rules": [
            {
                # Only series that name both resources can be mapped to an object.
                "seriesQuery": f'{METRIC}{{{NAMESPACE_LABEL}!="",{DEPLOYMENT_LABEL}!=""}}',
                "resources": {
                    "overrides": {
                        NAMESPACE_LABEL: {"resource": "namespace"},
                        DEPLOYMENT_LABEL: {"group": "apps", "resource": "deployment"},
                    }
                },
                "name": {"matches": f"^{METRIC}$", "as": METRIC},
                "metricsQuery": METRICS_QUERY,
            }
        ]
    }
