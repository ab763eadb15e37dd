"""The chart's own pods on the local cluster: recognised by their command, run on loopback.

The kubelet stand-in runs the operator's Deployment pod and the CRD-upgrade hook's
Job pod as local processes (``emulation.Kind.OPERATOR``); what it changes in their
command lines is only what one host forces: ports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import emulation
from e2e.localcluster.emulation import Kind, Ports
from e2e.localcluster.standin import PrometheusTargets

PORTS = Ports(http=41001, metrics=41002)


def pod(
    command: list[str], args: list[str] | None = None, *, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "operator", "command": command}
    if args is not None:
        container["args"] = args
    return {"metadata": {"name": "op", "labels": labels or {}}, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("command", "args"),
    [
        pytest.param(["specdeploy", "operator", "run"], None, id="command-only"),
        pytest.param(["specdeploy"], ["operator", "run", "--metrics-port=9401"], id="args"),
        pytest.param(["specdeploy", "operator"], ["crds", "--check"], id="crd-hook"),
    ],
)
def test_the_charts_pods_are_recognised_by_their_command(
    command: list[str], args: list[str] | None
) -> None:
    assert emulation.kind_of(pod(command, args)) is Kind.OPERATOR
    assert not emulation.needs_gpu(Kind.OPERATOR)


def test_labels_a_user_could_add_do_not_make_a_pod_an_operator_pod() -> None:
    foreign = pod(["sleep", "3600"], labels={"app.kubernetes.io/name": "specdeploy"})
    assert emulation.kind_of(foreign) is Kind.NONE
    assert emulation.kind_of(pod(["python", "-m", "specdeploy", "profile"])) is Kind.NONE


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            [
                "operator",
                "run",
                "--metrics-port=9401",
                "--metrics-addr=0.0.0.0",
                "--liveness=http://0.0.0.0:8080/healthz",
                "--leader-elect=true",
            ],
            id="equals-form",
        ),
        pytest.param(
            [
                "operator",
                "run",
                "--metrics-port",
                "9401",
                "--liveness",
                "http://0.0.0.0:8080/healthz",
                "--leader-elect=true",
            ],
            id="space-form",
        ),
    ],
)
def test_the_operators_ports_move_to_loopback_and_everything_else_stays(args: list[str]) -> None:
    out = emulation.operator_args(args, PORTS)
    assert out[:2] == ["operator", "run"]
    assert "--leader-elect=true" in out
    assert "--metrics-port=41002" in out and "--metrics-addr=127.0.0.1" in out
    assert "--liveness=http://127.0.0.1:41001/healthz" in out
    assert not any("9401" in a or "8080" in a or "0.0.0.0" in a for a in out)
    assert emulation.operator_metrics_on(out)


def test_metrics_off_stays_off_and_the_default_port_is_moved_too() -> None:
    off = emulation.operator_args(["operator", "run", "--metrics-port=0"], PORTS)
    assert off == ["operator", "run", "--metrics-port=0"]
    assert not emulation.operator_metrics_on(off)
    default = emulation.operator_args(["operator", "run"], PORTS)
    assert default == ["operator", "run", "--metrics-port=41002", "--metrics-addr=127.0.0.1"]


def test_the_crd_hook_runs_its_command_unchanged() -> None:
    args = ["operator", "crds", "--apply", "--metrics-port=1"]
    assert emulation.operator_args(args, PORTS) == args
    assert not emulation.operator_metrics_on(args)


def test_an_operator_pods_metrics_are_a_target_of_job_specdeploy_operator_until_withdrawn(
    tmp_path: Path,
) -> None:
    targets = PrometheusTargets(tmp_path)
    running = {"metadata": {"name": "specdeploy-abc", "namespace": "specdeploy-system"}}
    targets.publish_operator(running, "127.0.0.1:41002")
    (written,) = tmp_path.iterdir()
    (group,) = json.loads(written.read_text())
    assert group == {
        "targets": ["127.0.0.1:41002"],
        "labels": {
            "job": "specdeploy-operator",
            "namespace": "specdeploy-system",
            "pod": "specdeploy-abc",
        },
    }
    targets.withdraw(running)
    assert list(tmp_path.iterdir()) == []
