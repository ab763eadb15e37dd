"""GPU requests and GFD node selectors place pods on the right fake nodes, and they become Ready."""

from __future__ import annotations

from typing import Any

from e2e.localcluster import objects
from e2e.localcluster.fleet import CATALOG
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths


def _pods(admin: KubeApi, namespace: str, app: str) -> list[dict[str, Any]]:
    return admin.items(paths.path("Pod", namespace=namespace), labelSelector=f"app={app}")


def _node_product(admin: KubeApi, node: str) -> str:
    labels = admin.get(paths.path("Node", name=node))["metadata"]["labels"]
    return str(labels[objects.PRODUCT_LABEL])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_a_gpu_deployment_lands_only_on_its_product_and_becomes_ready(
    admin: KubeApi, namespace: str
) -> None:
    product = CATALOG["l40s"].product
    template = objects.pod_template(
        {"app": "serve"}, [objects.container(["serve"], gpus=1)], product=product
    )
    admin.create(objects.deployment("serve", namespace, template, replicas=3))

    path = paths.path("Deployment", namespace=namespace, name="serve")
    wait_for(
        lambda: admin.get(path).get("status", {}).get("availableReplicas") == 3,
        what="3 available replicas",
    )
    pods = _pods(admin, namespace, "serve")

    assert len(pods) == 3
    assert all(_ready(pod) for pod in pods)
    assert {_node_product(admin, pod["spec"]["nodeName"]) for pod in pods} == {product}


def test_gpu_capacity_is_honoured(admin: KubeApi, namespace: str) -> None:
    # Two H100 nodes with 8 GPUs each: a third 8-GPU replica has nowhere to go.
    gpus = CATALOG["h100"].gpus_per_node
    template = objects.pod_template(
        {"app": "big"}, [objects.container(["serve"], gpus=gpus)], product=CATALOG["h100"].product
    )
    admin.create(objects.deployment("big", namespace, template, replicas=3))

    def unschedulable() -> list[dict[str, Any]]:
        return [
            c
            for pod in _pods(admin, namespace, "big")
            for c in pod.get("status", {}).get("conditions", [])
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
        ]

    def placed() -> set[str]:
        return {
            p["spec"]["nodeName"]
            for p in _pods(admin, namespace, "big")
            if p["spec"].get("nodeName")
        }

    refused = wait_for(unschedulable, what="an Unschedulable replica")
    nodes = wait_for(lambda: placed() if len(placed()) == 2 else None, what="2 replicas placed")

    assert "Insufficient nvidia.com/gpu" in refused[0]["message"]
    assert len(refused) == 1
    assert {_node_product(admin, node) for node in nodes} == {CATALOG["h100"].product}
