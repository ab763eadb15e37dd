"""The kubelet stand-in runs a pod's command locally and ends the pod with its real outcome."""

from __future__ import annotations

import json
from typing import Any

from e2e.localcluster import objects
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths


def _job_condition(admin: KubeApi, namespace: str, name: str) -> str | None:
    path = paths.path("Job", namespace=namespace, name=name)
    for condition in admin.get(path).get("status", {}).get("conditions", []):
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return str(condition["type"])
    return None


def _terminated(admin: KubeApi, namespace: str, job: str) -> dict[str, Any]:
    selector = f"batch.kubernetes.io/job-name={job}"
    (pod,) = admin.items(paths.path("Pod", namespace=namespace), labelSelector=selector)
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    return {**state, "phase": pod["status"]["phase"]}


def _run_job(admin: KubeApi, namespace: str, name: str, template: dict[str, Any]) -> str:
    admin.create(objects.job(name, namespace, template))
    return wait_for(
        lambda: _job_condition(admin, namespace, name), what=f"job {name} to finish", timeout=90
    )


def test_a_job_ends_with_the_commands_real_exit_code_and_message(
    admin: KubeApi, namespace: str
) -> None:
    script = "import sys; open(sys.argv[1], 'w').write('out of luck'); sys.exit(3)"
    command = ["python", "-c", script, "/dev/termination-log"]
    template = objects.pod_template(
        {"app": "fail"}, [objects.container(command)], run_locally=True, restart_policy="Never"
    )

    outcome = _run_job(admin, namespace, "fail", template)
    terminated = _terminated(admin, namespace, "fail")

    assert outcome == "Failed"
    assert terminated["exitCode"] == 3
    assert terminated["message"] == "out of luck"
    assert terminated["phase"] == "Failed"


def test_a_successful_command_completes_its_job(admin: KubeApi, namespace: str) -> None:
    command = ["python", "-c", "print('done')"]
    template = objects.pod_template(
        {"app": "ok"}, [objects.container(command)], run_locally=True, restart_policy="Never"
    )

    outcome = _run_job(admin, namespace, "ok", template)
    terminated = _terminated(admin, namespace, "ok")

    assert outcome == "Complete"
    assert terminated["exitCode"] == 0
    assert terminated["phase"] == "Succeeded"


def test_the_log_tail_is_the_message_under_fallback_to_logs_on_error(
    admin: KubeApi, namespace: str
) -> None:
    command = ["python", "-c", "import sys; print('boom: no GPU', file=sys.stderr); sys.exit(1)"]
    container = {**objects.container(command), "terminationMessagePolicy": "FallbackToLogsOnError"}
    template = objects.pod_template(
        {"app": "logs"}, [container], run_locally=True, restart_policy="Never"
    )

    _run_job(admin, namespace, "logs", template)

    assert "boom: no GPU" in _terminated(admin, namespace, "logs")["message"]


# Runs as the pod's "container": reports what it can see and do, as JSON, in
# its termination message. It connects as a program in a pod does, with the
# installed client (the checkout's e2e/ is not importable there) and the
# stand-in's $KUBECONFIG, whose token file is the pod's ServiceAccount token.
PROBE = """
import json, os, sys
from pathlib import Path
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.client import ApiError
from specdeploy.runtime.kube.config import connect

settings, namespace_file, out = sys.argv[1:4]
namespace = Path(namespace_file).read_text()
api = connect()
report = {
    "greeting": os.environ["GREETING"],
    "pod_name": os.environ["POD_NAME"],
    "motd": Path(settings, "motd").read_text(),
    "namespace": namespace,
}
cm = api.request("GET", paths.path("ConfigMap", namespace, "settings"))
report["read_configmap"] = cm["data"]["greeting"]
try:
    api.request("GET", paths.path("Secret", namespace))
    report["list_secrets"] = 200
except ApiError as err:
    report["list_secrets"] = err.status
Path(out).write_text(json.dumps(report))
"""


def test_the_command_gets_the_pods_env_configmaps_and_service_account(
    admin: KubeApi, namespace: str
) -> None:
    admin.create(objects.config_map("settings", namespace, {"greeting": "hi", "motd": "be kind"}))
    admin.create(objects.service_account("worker", namespace))
    admin.create(objects.role("read-configmaps", namespace, ["configmaps"], ["get"]))
    admin.create(
        objects.role_binding(
            "worker", namespace, role_name="read-configmaps", service_account="worker"
        )
    )
    env = [
        {
            "name": "GREETING",
            "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}},
        },
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    command = [
        "python",
        "-c",
        PROBE,
        "/etc/settings",
        f"{sa_dir}/namespace",
        "/dev/termination-log",
    ]
    container = objects.container(
        command, env=env, mounts=[{"name": "settings", "mountPath": "/etc/settings"}]
    )
    template = objects.pod_template(
        {"app": "probe"},
        [container],
        run_locally=True,
        restart_policy="Never",
        service_account="worker",
        volumes=[{"name": "settings", "configMap": {"name": "settings"}}],
    )

    outcome = _run_job(admin, namespace, "probe", template)
    terminated = _terminated(admin, namespace, "probe")
    report = json.loads(terminated["message"])

    assert outcome == "Complete", terminated
    assert report["greeting"] == "hi"
    assert report["pod_name"].startswith("probe-")
    assert report["motd"] == "be kind"
    assert report["namespace"] == namespace
    assert report["read_configmap"] == "hi"
    assert report["list_secrets"] == 403
