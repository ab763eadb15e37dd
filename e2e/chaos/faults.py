"""Process faults on the cluster's recorded components: signals, and restarts.

Every component's PID and kernel start time are recorded when it starts
(``processes``); a fault signals that process group (SIGKILL, SIGSTOP,
SIGCONT), so exactly the component and its children are hit. ``restart``
starts a component again from the command line it was started with (rebuilt
by ``components``/``cluster`` from the same layout and ports: the same argv)
and waits until it serves, so etcd keeps its data and the API server its
port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from e2e.localcluster import cluster as cluster_mod
from e2e.localcluster import components, processes
from e2e.localcluster.binaries import Binaries
from e2e.localcluster.cluster import Cluster
from e2e.localcluster.components import Component

DEATH_TIMEOUT = 15.0


def record(cluster: Cluster, name: str) -> processes.Record:
    found = [r for r in processes.read_records(cluster.layout.run) if r.name == name]
    if not found:
        raise LookupError(f"no recorded process {name!r} in {cluster.layout.run}")
    return found[-1]


def signal_component(cluster: Cluster, name: str, sig: signal.Signals) -> processes.Record:
    """Send ``sig`` to a component's process group; the record it was sent to."""
    target = record(cluster, name)
    if not processes.alive(target):
        raise LookupError(f"{name} (pid {target.pid}) is not running")
    os.killpg(target.pid, sig)
    return target


def kill(cluster: Cluster, name: str) -> processes.Record:
    """SIGKILL a component and wait until it is gone (reaped when it is our child)."""
    target = signal_component(cluster, name, signal.SIGKILL)
    deadline = time.monotonic() + DEATH_TIMEOUT
    # A killed child of ours is a zombie until reaped, and ``alive`` says False for one.
    while processes.alive(target):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} (pid {target.pid}) outlived SIGKILL")
        time.sleep(0.05)
    return target


def freeze(cluster: Cluster, name: str) -> None:
    signal_component(cluster, name, signal.SIGSTOP)


def thaw(cluster: Cluster, name: str) -> None:
    signal_component(cluster, name, signal.SIGCONT)


def killer(cluster: Cluster, name: str) -> Callable[[], None]:
    """A callback that SIGKILLs ``name`` at once (for the proxy's kill rule; no waiting)."""
    target = record(cluster, name)

    def fire() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(target.pid, signal.SIGKILL)

    return fire


def component(cluster: Cluster, name: str, *, operator_kubeconfig: Path | None = None) -> Component:
    """The component ``name`` as the cluster started it (same binary, layout and ports)."""
    bins = Binaries.for_checkout()
    layout, ports = cluster.layout, cluster.state.ports
    builders: dict[str, Callable[[], Component]] = {
        "etcd": lambda: components.etcd(bins.path("etcd"), layout, ports),
        "kube-apiserver": lambda: components.apiserver(bins.path("kube-apiserver"), layout, ports),
        "kube-controller-manager": lambda: components.controller_manager(
            bins.path("kube-controller-manager"), layout, ports
        ),
        "kube-scheduler": lambda: components.scheduler(bins.path("kube-scheduler"), layout, ports),
        "prometheus": lambda: components.prometheus(bins.path("prometheus"), layout, ports),
        "operator": lambda: cluster_mod.operator_component(
            layout, ports, kubeconfig_path=operator_kubeconfig
        ),
    }
    if name not in builders:
        raise LookupError(f"no restart recipe for {name!r}; known: {sorted(builders)}")
    return builders[name]()


def restart(
    cluster: Cluster, name: str, *, operator_kubeconfig: Path | None = None, timeout: float = 90.0
) -> processes.Record:
    """Start ``name`` again (it must not be running) and wait until it answers ready."""
    current = record(cluster, name)
    if processes.alive(current):
        raise RuntimeError(f"{name} (pid {current.pid}) is still running; kill it first")
    if name == "operator":
        cluster_mod.start_operator(
            cluster, kubeconfig_path=operator_kubeconfig, log=lambda _m: None
        )
        return record(cluster, name)
    spec = component(cluster, name, operator_kubeconfig=operator_kubeconfig)
    started = processes.spawn(
        spec.name,
        spec.argv,
        run_dir=cluster.layout.run,
        log_dir=cluster.layout.logs,
        marker=str(cluster.layout.root),
        env={**os.environ, **spec.env},
    )
    processes.wait_ready(
        started,
        lambda: cluster_mod.probe(spec, cluster.layout),
        log=cluster.layout.log(name),
        timeout=timeout,
    )
    return started
