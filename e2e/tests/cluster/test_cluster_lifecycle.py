"""KWOK gives pods their lifecycle: Job pods complete on their own, any pod exits on the gate."""

from __future__ import annotations

from typing import Any

from e2e.localcluster import objects, stages
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths


def _job_complete(admin: KubeApi, namespace: str, name: str) -> bool:
    path = paths.path("Job", namespace=namespace, name=name)
    conditions = admin.get(path).get("status", {}).get("conditions", [])
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def test_a_job_whose_pods_are_not_run_locally_completes_through_kwok(
    admin: KubeApi, namespace: str
) -> None:
    template = objects.pod_template(
        {"app": "quick"}, [objects.container(["true"])], restart_policy="Never"
    )
    admin.create(objects.job("quick", namespace, template))

    wait_for(lambda: _job_complete(admin, namespace, "quick"), what="job quick Complete")


def test_the_exit_gate_ends_a_running_pod_with_the_given_code_and_message(
    admin: KubeApi, namespace: str
) -> None:
    template = objects.pod_template({"app": "srv"}, [objects.container(["serve"])])
    admin.create(objects.deployment("srv", namespace, template, replicas=1))
    pods = paths.path("Pod", namespace=namespace)

    def running() -> list[dict[str, Any]]:
        found = admin.items(pods, labelSelector="app=srv", fieldSelector="status.phase=Running")
        return found

    (pod,) = wait_for(running, what="a Running pod")
    path = paths.path("Pod", namespace=namespace, name=pod["metadata"]["name"])
    admin.merge_patch(path, {"metadata": {"annotations": stages.exit_annotations(137, "OOM")}})

    def failed() -> dict[str, Any] | None:
        current = admin.get(path)
        return current if current["status"]["phase"] == "Failed" else None

    ended = wait_for(failed, what="the pod Failed")
    terminated = ended["status"]["containerStatuses"][0]["state"]["terminated"]

    assert terminated["exitCode"] == 137
    assert terminated["message"] == "OOM"
    assert terminated["reason"] == "Error"
