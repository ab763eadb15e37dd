"""One Service for the model, across every pool: clients need not know GPU types."""

from __future__ import annotations

from specdeploy.operator.builders.common import (
    COMPONENT_LABEL,
    DEPLOYMENT_LABEL,
    SERVING,
    Manifest,
    Parent,
    metadata,
    parent_labels,
)
from specdeploy.operator.builders.deployment import HTTP_PORT
from specdeploy.operator.naming import label_value


def service_endpoint(namespace: str, name: str) -> str:
    """The OpenAI base URL clients in the cluster use (append ``/v1``)."""
    return f"http://{name}.{namespace}.svc:{HTTP_PORT}"


def model_service(parent: Parent, *, name: str) -> Manifest:
    selector = {DEPLOYMENT_LABEL: label_value(parent.name), COMPONENT_LABEL: SERVING}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(parent, name, parent_labels(parent, SERVING)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
