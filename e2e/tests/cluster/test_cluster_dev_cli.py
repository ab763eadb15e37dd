"""``specdeploy dev up`` / ``dev down`` on clusters of their own: idempotent, nothing left."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from e2e.localcluster import processes
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths


def _dev(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy", "dev", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _pids(workdir: Path) -> dict[str, int]:
    return {r.name: r.pid for r in processes.read_records(workdir / "run")}


def _exported(stdout: str, name: str) -> str:
    """The value of ``export NAME=...`` in ``dev up``'s output (exactly one such line)."""
    (value,) = [
        line.removeprefix(f"export {name}=")
        for line in stdout.splitlines()
        if line.startswith(f"export {name}=")
    ]
    return value


def test_up_is_idempotent_and_down_leaves_no_process(tmp_path: Path) -> None:
    workdir = tmp_path / "dev"
    crds = tmp_path / "no-crds"  # the project's CRDs have a test of their own
    crds.mkdir()
    up = [
        "up",
        "--nodes",
        "a100=1",
        "--workdir",
        str(workdir),
        "--crds",
        str(crds),
        "--no-operator",
    ]
    try:
        first = _dev(*up)
        assert first.returncode == 0, first.stderr
        started = _pids(workdir)
        second = _dev(*up)
        assert second.returncode == 0, second.stderr
        reused = _pids(workdir)
        last_line = second.stdout.strip().splitlines()[-1]
        api = KubeApi.from_kubeconfig(Path(last_line.removeprefix("export KUBECONFIG=")))
        nodes = [n["metadata"]["name"] for n in api.items(paths.path("Node"))]
        prometheus_url = _exported(second.stdout, "SPECDEPLOY_PROMETHEUS_URL")
        with urllib.request.urlopen(f"{prometheus_url}/-/ready", timeout=5) as ready:
            prometheus_status = ready.status
        recorded = json.loads((workdir / "cluster.json").read_text())["prometheus_url"]
    finally:
        down = _dev("down", "--workdir", str(workdir))

    assert last_line.startswith("export KUBECONFIG=")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", prometheus_url)
    assert _exported(first.stdout, "SPECDEPLOY_PROMETHEUS_URL") == prometheus_url == recorded
    assert prometheus_status == 200
    assert reused == started  # Prometheus included: a healthy cluster is reused whole
    assert "already running" in second.stderr
    assert _pids(workdir) == {} and set(started) >= {"etcd", "kube-apiserver", "kwok", "prometheus"}
    assert nodes == ["gpu-a100-0"]
    assert down.returncode == 0, down.stderr
    assert processes.marked_processes(str(workdir.resolve())) == []
    assert not any(processes.start_ticks(pid) for pid in started.values())


def test_down_cleans_up_after_the_harness_was_killed(tmp_path: Path) -> None:
    workdir, no_crds = tmp_path / "crashed", tmp_path / "no-crds"
    no_crds.mkdir()
    up = ["up", "--no-operator", "--workdir", str(workdir), "--crds", str(no_crds)]
    harness = subprocess.Popen(
        [sys.executable, "-m", "specdeploy", "dev", *up],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Kill it mid-start, once the API server has been spawned.
        wait_for(lambda: "kube-apiserver" in _pids(workdir), what="API server spawned", timeout=120)
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    orphans = processes.marked_processes(str(workdir.resolve()))

    down = _dev("down", "--workdir", str(workdir))

    assert orphans, "the killed harness left no processes: the test proves nothing"
    assert down.returncode == 0, down.stderr
    assert processes.marked_processes(str(workdir.resolve())) == []
