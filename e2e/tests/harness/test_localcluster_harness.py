"""Harness pieces that need no cluster: stage config, component flags, waiting, processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from e2e.localcluster import components, processes, stages
from e2e.localcluster.layout import Layout, Ports
from e2e.localcluster.waiting import WaitTimeout, wait_for

PORTS = Ports(2379, 2380, 6443, 10257, 10259, 10247, 8080, 9090, 8088, 9401)


def test_the_kwok_config_holds_node_and_pod_stages_with_the_exit_gate() -> None:
    docs = list(yaml.safe_load_all(stages.STAGES_FILE.read_text()))
    names = {d["metadata"]["name"] for d in docs}
    exit_stage = next(d for d in docs if d["metadata"]["name"] == "pod-exit")
    complete = next(d for d in docs if d["metadata"]["name"] == "pod-complete")
    keys = [e["key"] for e in complete["spec"]["selector"]["matchExpressions"]]

    assert {d["kind"] for d in docs} == {"Stage"}
    assert names == {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-start-unready",
        "pod-probe-passed",
        "pod-complete",
        "pod-exit",
        "pod-delete",
    }
    assert stages.EXIT_CODE in exit_stage["spec"]["selector"]["matchExpressions"][2]["key"]
    assert f'.metadata.annotations["{stages.RUN_LOCALLY}"]' in keys


def test_the_apiserver_enforces_rbac_on_loopback_with_explicit_certs() -> None:
    argv = components.apiserver(Path("/bin/kube-apiserver"), Layout(Path("/w")), PORTS).argv

    assert "--authorization-mode=RBAC" in argv
    assert "--bind-address=127.0.0.1" in argv and "--advertise-address=127.0.0.1" in argv
    assert "--secure-port=6443" in argv
    assert "--tls-cert-file=/w/pki/apiserver.crt" in argv
    assert "--cert-dir=/w/certs/kube-apiserver" in argv


def test_exit_annotations_keep_the_tail_of_a_long_message() -> None:
    notes = stages.exit_annotations(2, "x" * 5000 + "the end")

    assert notes[stages.EXIT_CODE] == "2"
    assert notes[stages.TERMINATION_MESSAGE].endswith("the end")
    assert len(notes[stages.TERMINATION_MESSAGE]) == 4096


def test_wait_for_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "found"])

    assert wait_for(lambda: next(values), what="x", sleep=lambda _s: None) == "found"


def test_wait_for_names_what_it_waited_for_and_the_last_value() -> None:
    ticks = iter(range(100))

    with pytest.raises(WaitTimeout, match=r"the answer; last: \[\]"):
        wait_for(
            lambda: [],
            what="the answer",
            timeout=3,
            clock=lambda: float(next(ticks)),
            sleep=lambda _s: None,
        )


def test_a_recorded_process_and_its_children_are_stopped_by_pid(tmp_path: Path) -> None:
    marker = str(tmp_path)
    sleep = "import time; time.sleep(60)"
    script = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleep!r}]); {sleep}"
    record = processes.spawn(
        "sleeper",
        [sys.executable, "-c", script],
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
        marker=marker,
    )
    wait_for(lambda: len(processes.marked_processes(marker)) == 2, what="parent and child")

    stopped = processes.stop_all(tmp_path / "run", marker=marker)

    assert [r.pid for r in stopped] == [record.pid]
    assert processes.marked_processes(marker) == []
    assert not (tmp_path / "run" / "sleeper.pid").exists()


def test_a_pid_reused_by_another_process_is_not_stopped(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ticks = processes.start_ticks(other.pid)
        assert ticks is not None
        stale = processes.Record("old", other.pid, ticks - 1)

        processes.stop(stale, grace=0.1)

        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_process_that_dies_before_ready_fails_naming_its_log(tmp_path: Path) -> None:
    record = processes.spawn(
        "crasher",
        [sys.executable, "-c", "print('bad flag --foo'); raise SystemExit(3)"],
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
        marker=str(tmp_path),
    )

    with pytest.raises(
        processes.ComponentFailed, match=r"(?s)crasher exited with code 3.*bad flag"
    ):
        processes.wait_ready(
            record, lambda: False, log=tmp_path / "logs" / "crasher.log", timeout=10
        )
