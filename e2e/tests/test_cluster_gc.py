"""Garbage collection removes owned objects when their owner goes."""

from __future__ import annotations

import pytest

from specdeploy.localcluster import objects
from specdeploy.localcluster.kubeapi import KubeApi, path_for
from specdeploy.localcluster.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_deleting_a_deployment_removes_its_replicasets_pods_and_owned_configmaps(
    admin: KubeApi, namespace: str
) -> None:
    template = objects.pod_template({"app": "web"}, [objects.container(["serve"])])
    owner = admin.create(objects.deployment("web", namespace, template, replicas=2))
    table = objects.config_map("web-table", namespace, {"k": "3"})
    table["metadata"]["ownerReferences"] = [objects.owner_reference(owner)]
    admin.create(table)
    pods_path = path_for("Pod", namespace=namespace)
    rs_path = path_for("ReplicaSet", namespace=namespace, api_version="apps/v1")
    wait_for(lambda: len(admin.items(pods_path, labelSelector="app=web")) == 2, what="2 pods")

    admin.delete(path_for("Deployment", namespace=namespace, name="web", api_version="apps/v1"))

    wait_for(lambda: not admin.items(rs_path), what="ReplicaSets gone")
    wait_for(lambda: not admin.items(pods_path, labelSelector="app=web"), what="pods gone")
    config_maps = path_for("ConfigMap", namespace=namespace, name="web-table")
    wait_for(lambda: admin.get_or_none(config_maps) is None, what="owned ConfigMap gone")
