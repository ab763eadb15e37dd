"""Garbage collection removes owned objects when their owner goes."""

from __future__ import annotations

from e2e.localcluster import objects
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths


def test_deleting_a_deployment_removes_its_replicasets_pods_and_owned_configmaps(
    admin: KubeApi, namespace: str
) -> None:
    template = objects.pod_template({"app": "web"}, [objects.container(["serve"])])
    owner = admin.create(objects.deployment("web", namespace, template, replicas=2))
    table = objects.config_map("web-table", namespace, {"k": "3"})
    table["metadata"]["ownerReferences"] = [objects.owner_reference(owner)]
    admin.create(table)
    pods_path = paths.path("Pod", namespace=namespace)
    rs_path = paths.path("ReplicaSet", namespace=namespace)
    wait_for(lambda: len(admin.items(pods_path, labelSelector="app=web")) == 2, what="2 pods")

    admin.delete(paths.path("Deployment", namespace=namespace, name="web"))

    wait_for(lambda: not admin.items(rs_path), what="ReplicaSets gone")
    wait_for(lambda: not admin.items(pods_path, labelSelector="app=web"), what="pods gone")
    config_maps = paths.path("ConfigMap", namespace=namespace, name="web-table")
    wait_for(lambda: admin.get_or_none(config_maps) is None, what="owned ConfigMap gone")
