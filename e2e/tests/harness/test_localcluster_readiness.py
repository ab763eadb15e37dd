"""A serving pod's Ready held back until its readiness probe passes (no cluster needed).

KWOK runs no probes: ``kwok-stages.yaml`` makes serving pods Running but not
Ready, the kubelet stand-in probes them and sets ``stages.PROBE_PASSED``, and
KWOK's ``pod-probe-passed`` stage marks them Ready. The cluster side (a
rollout that never leaves the Service without a ready endpoint) is the live
floor e2e's; these check each half's rule.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.localcluster import gateway, stages
from e2e.localcluster import standin as standin_mod
from e2e.localcluster.emulation import Kind, Ports
from e2e.localcluster.standin import PodRun, StandIn

Obj = dict[str, Any]


def _docs(path: Path) -> dict[str, Obj]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(path.read_text()) if d}


def _keys(stage: Obj) -> list[str]:
    return [e["key"] for e in stage["spec"]["selector"]["matchExpressions"]]


def test_probed_stages_hold_serving_pods_back_and_kwok_mode_makes_them_ready_at_once(
    tmp_path: Path,
) -> None:
    probed = _docs(stages.write_config(tmp_path / "probed.yaml"))
    at_once = _docs(stages.write_config(tmp_path / "kwok.yaml", probed=False))
    label = f'.metadata.labels["{stages.PROBED_LABEL[0]}"]'

    assert set(stages.PROBED_STAGES) <= set(probed) and not set(stages.PROBED_STAGES) & set(at_once)
    assert label in _keys(probed["pod-ready"]) and label not in _keys(at_once["pod-ready"])
    assert label in _keys(probed["pod-start-unready"])
    assert f'.metadata.annotations["{stages.PROBE_PASSED}"]' in _keys(probed["pod-probe-passed"])
    unready = probed["pod-start-unready"]["spec"]["next"]["statusTemplate"]
    assert 'status: "False"\n  reason: ContainersNotReady\n  type: Ready' in unready
    for name, stage in at_once.items():  # every other stage as the file has it
        if name != "pod-ready":
            assert stage == probed[name], name


class _Health(BaseHTTPRequestHandler):
    status = 503

    def do_GET(self) -> None:
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    _Health.status = 503


class _Api:
    def __init__(self) -> None:
        self.patches: list[tuple[str, Obj]] = []

    def merge_patch(self, path: str, patch: Obj) -> Obj:
        self.patches.append((path, patch))
        return patch


def _run(tmp_path: Path, port: int, labels: dict[str, str]) -> PodRun:
    container = {"name": "vllm", "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": labels},
        "spec": {"containers": [container]},
    }
    return PodRun(pod, tmp_path, kind=Kind.SERVING, ports=Ports(http=port, metrics=1))


def _passed(run: PodRun) -> bool:
    return run.probe_passed


def test_the_stand_in_sets_probe_passed_once_the_servers_probe_answers(
    tmp_path: Path, server: ThreadingHTTPServer
) -> None:
    api = _Api()
    standin = StandIn(api, pods_dir=tmp_path, marker="m")  # type: ignore[arg-type]
    run = _run(tmp_path, server.server_address[1], {"specdeploy.io/component": "serving"})

    standin._probe(run)  # loading: 503
    assert api.patches == [] and not _passed(run)
    _Health.status = 200
    standin._probe(run)
    passed = {"metadata": {"annotations": {stages.PROBE_PASSED: "true"}}}
    assert _passed(run) and api.patches == [("/api/v1/namespaces/ns/pods/p", passed)]


def test_a_pod_kwok_does_not_hold_back_passes_without_a_patch(
    tmp_path: Path, server: ThreadingHTTPServer
) -> None:
    api = _Api()
    standin = StandIn(api, pods_dir=tmp_path, marker="m")  # type: ignore[arg-type]
    run = _run(tmp_path, server.server_address[1], {})

    standin._probe(run)
    assert run.probe_passed and api.patches == []


def _with_pre_stop(command: list[str] | None) -> Obj:
    container: Obj = {"name": "vllm"}
    if command is not None:
        container["lifecycle"] = {"preStop": {"exec": {"command": command}}}
    return {"spec": {"containers": [container]}}


def test_a_deleted_pods_prestop_sleep_outlasts_the_gateways_refresh_and_is_capped() -> None:
    assert standin_mod.PRE_STOP_CAP_SECONDS > gateway.REFRESH_SECONDS
    assert standin_mod._pre_stop_seconds(_with_pre_stop(["sleep", "15"])) == 2.0
    assert standin_mod._pre_stop_seconds(_with_pre_stop(["sleep", "0.5"])) == 0.5
    assert standin_mod._pre_stop_seconds(_with_pre_stop(["sleep", "x"])) == 0.0
    assert standin_mod._pre_stop_seconds(_with_pre_stop(["echo", "15"])) == 0.0
    assert standin_mod._pre_stop_seconds(_with_pre_stop(None)) == 0.0


def test_a_deleted_pod_gets_sigterm_after_its_prestop_sleep_not_before(tmp_path: Path) -> None:
    standin = StandIn(_Api(), pods_dir=tmp_path, marker="m")  # type: ignore[arg-type]
    run = PodRun(_with_pre_stop(["sleep", "15"]) | {"metadata": {"uid": "u"}}, tmp_path)
    run.pod["spec"]["terminationGracePeriodSeconds"] = 30
    run.processes["vllm"] = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = time.monotonic()
        standin._stop(run)
        assert run.processes["vllm"].poll() is None  # still serving through the sleep
        deadline = time.monotonic() + 10
        while run.processes["vllm"].poll() is None and time.monotonic() < deadline:
            standin._reap()
            time.sleep(0.1)
        assert run.processes["vllm"].returncode == -signal.SIGTERM
        assert time.monotonic() - started >= standin_mod.PRE_STOP_CAP_SECONDS
    finally:
        standin_mod._kill([run])
