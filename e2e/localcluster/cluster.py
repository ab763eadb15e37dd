"""Bring a local cluster up in a work directory, and take it down again.

The cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
KWOK, the kubelet stand-in, Prometheus 3 (file SD over
``<workdir>/prometheus/targets``, see ``prometheus``) and, unless left out,
the operator.

``up`` is idempotent: a healthy cluster in the directory is reused as it is.
Otherwise whatever a crashed run left is stopped by recorded PID, the state
(etcd data, logs, pod dirs) is wiped and the components start in dependency
order, each waited for with a timeout that names its log on failure. The PKI
survives restarts of the same directory, so kubeconfigs handed out earlier
keep their CA. ``down`` stops every recorded process and any straggler that
carries the directory's marker.
"""

from __future__ import annotations

import http.client
import os
import shutil
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.localcluster import (
    audit,
    components,
    fleet,
    identity,
    kubeconfig,
    pki,
    processes,
    prometheus,
    stages,
)
from e2e.localcluster.binaries import Binaries, repo_root
from e2e.localcluster.components import Component
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.layout import Layout, Ports, State, StateMismatch
from e2e.localcluster.standin import READY_FILE, SERVING_EMULATED, SERVING_MODES
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths

Log = Callable[[str], None]
READY_TIMEOUT = 90.0


@dataclass(frozen=True)
class Cluster:
    """A running cluster: where its files are and how to reach it."""

    layout: Layout
    state: State

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig()

    @property
    def prometheus_url(self) -> str:
        """Prometheus' HTTP API (``/api/v1/query``); ``/-/ready`` answers once it serves."""
        return self.state.prometheus_url

    @property
    def prometheus_targets(self) -> Path:
        """The file-SD directory: ``prometheus.write_targets`` files here are scraped."""
        return prometheus.targets_dir(self.layout)

    def api(self) -> KubeApi:
        return KubeApi.from_kubeconfig(self.kubeconfig)


def _ssl_context(component: Component, layout: Layout) -> ssl.SSLContext:
    if component.tls == "self-signed":
        return ssl._create_unverified_context()
    context = ssl.create_default_context(cafile=str(layout.pki.ca_cert))
    context.load_cert_chain(str(layout.pki.cert("admin")), str(layout.pki.key("admin")))
    return context


def probe(component: Component, layout: Layout) -> bool:
    """One readiness check: 200 from the component's health URL (or its ready file)."""
    url = urllib.parse.urlsplit(component.ready_url)
    if url.scheme == "file":
        return Path(url.path).exists()
    if url.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            url.hostname or "", url.port, timeout=2, context=_ssl_context(component, layout)
        )
    else:
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=2)
    try:
        conn.request("GET", url.path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _start(component: Component, layout: Layout, marker: str) -> processes.Record:
    return processes.spawn(
        component.name,
        component.argv,
        run_dir=layout.run,
        log_dir=layout.logs,
        marker=marker,
        env={**os.environ, **component.env},
    )


def _wait(component: Component, record: processes.Record, layout: Layout) -> None:
    processes.wait_ready(
        record,
        lambda: probe(component, layout),
        log=layout.log(component.name),
        timeout=READY_TIMEOUT,
    )


def _start_all(group: list[Component], layout: Layout, marker: str, log: Log) -> None:
    """Start a group of independent components together, then wait for each."""
    records = [(c, _start(c, layout, marker)) for c in group]
    for component, record in records:
        _wait(component, record, layout)
        log(f"dev: {component.name} ready (pid {record.pid})")


def _write_kubeconfigs(layout: Layout, server: str) -> None:
    ca = layout.pki.ca_cert
    for user in pki.CLIENTS:
        doc = kubeconfig.document(
            server=server,
            ca_file=ca,
            user=user,
            cert_file=layout.pki.cert(user),
            key_file=layout.pki.key(user),
        )
        kubeconfig.write(layout.kubeconfig(user), doc)


def healthy(layout: Layout) -> bool:
    """Every recorded process alive, and the API server and Prometheus ready.

    A cluster started by an older harness (its state has other fields, or it
    runs no Prometheus) is not healthy, so ``up`` restarts it as this one.
    """
    records = processes.read_records(layout.run)
    if not layout.state.exists() or not records or not all(map(processes.alive, records)):
        return False
    try:
        ports = State.load(layout.state).ports
    except StateMismatch:
        return False
    unused = Path("unused")
    checks = (
        components.apiserver(unused, layout, ports),
        components.prometheus(unused, layout, ports),
    )
    return all(probe(component, layout) for component in checks)


def register_fleet(api: KubeApi, spec: str) -> list[str]:
    """Create the fleet's Node objects that do not exist yet; return all their names."""
    names = []
    for node in fleet.fleet_manifests(fleet.parse_fleet(spec)):
        names.append(node["metadata"]["name"])
        try:
            api.create(node)
        except ApiError as err:
            if err.status != 409:
                raise
    return names


def _all_ready(api: KubeApi, names: list[str]) -> bool:
    ready = {
        node["metadata"]["name"] for node in api.items(paths.path("Node")) if fleet.ready(node)
    }
    return ready.issuperset(names)


def wait_nodes_ready(api: KubeApi, names: list[str], *, timeout: float = 60.0) -> None:
    """KWOK's node-initialize stage sets Ready; wait until it has, for every node."""
    wait_for(lambda: _all_ready(api, names), what=f"nodes {names} Ready", timeout=timeout)


def wait_nodes_schedulable(api: KubeApi, names: list[str], *, timeout: float = 600.0) -> None:
    """Every node Ready and without lifecycle taints (``fleet.schedulable``)."""
    wanted = set(names)

    def done() -> bool:
        fit = {n["metadata"]["name"] for n in api.items(paths.path("Node")) if fleet.schedulable(n)}
        return wanted <= fit

    wait_for(done, what=f"{len(wanted)} nodes schedulable", timeout=timeout)


def install_crds(kubectl: Path, kubeconfig_path: Path, crds: Path, log: Log) -> None:
    """Apply the project's CRDs (if crds/ has any) and wait until they are Established."""
    manifests = sorted(crds.glob("*.yaml")) if crds.is_dir() else []
    if not manifests:
        log(f"dev: no CRDs in {crds}; none installed")
        return
    base = [str(kubectl), f"--kubeconfig={kubeconfig_path}"]
    for action in (["apply"], ["wait", "--for=condition=Established", "--timeout=60s"]):
        done = subprocess.run([*base, *action, "-f", str(crds)], capture_output=True, text=True)
        if done.returncode != 0:
            raise processes.ComponentFailed(f"kubectl {action[0]} {crds}: {done.stderr.strip()}")
    log(f"dev: installed {len(manifests)} CRD manifest(s) from {crds}")


OPERATOR = "operator"
"""The component name of the cluster's own operator (``start_operator``'s default)."""


def operator_component(
    layout: Layout,
    ports: Ports,
    watched: str | None = None,
    *,
    name: str = OPERATOR,
    liveness_port: int | None = None,
    metrics_port: int | None = None,
    kubeconfig_path: Path | None = None,
    launcher: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> Component:
    """The operator as a local process; its log has one line per reconcile (``--log-level``).

    It logs in as its own ServiceAccount with the ClusterRole it generates
    (``identity.install`` wrote the kubeconfig), never as the cluster's admin.
    It reads the cluster's Prometheus (``SPECDEPLOY_PROMETHEUS_URL``) for a deployment
    whose spec names none, as an operator installed beside a cluster's Prometheus would.
    The keywords make a second operator beside it (two replicas, an upgrade's
    skewed build): a component name and ports of its own, another identity
    (``kubeconfig_path``), another way to start the same CLI (``launcher``,
    default ``python -m specdeploy``), more flags.
    """
    url = f"http://127.0.0.1:{liveness_port or ports.operator}/healthz"
    start = list(launcher) or [sys.executable, "-m", "specdeploy"]
    argv = [*start, "operator", "run", f"--liveness={url}"]
    argv += [f"--metrics-port={metrics_port or ports.operator_metrics}", "--metrics-addr=127.0.0.1"]
    argv.append("--log-level=debug")
    if watched is not None:
        argv.append(f"--namespace={watched}")
    argv += extra_args
    env = {
        "KUBECONFIG": str(kubeconfig_path or layout.kubeconfig("operator")),
        # What the chart's downward API gives the pod: its own namespace, where the
        # leader election's Lease lives (watching one namespace, the Lease is there).
        "POD_NAMESPACE": identity.NAMESPACE,
        "SPECDEPLOY_PROMETHEUS_URL": f"http://127.0.0.1:{ports.prometheus}",
    }
    return Component(name, argv, url, "none", env)


def standin_component(layout: Layout, serving: str = SERVING_EMULATED) -> Component:
    """The kubelet stand-in; ``serving``: its ``--serving`` mode (``standin.SERVING_MODES``)."""
    argv = [
        sys.executable,
        "-m",
        "e2e.localcluster.standin",
        f"--kubeconfig={layout.kubeconfig()}",
        f"--workdir={layout.root}",
        f"--prometheus-targets={prometheus.targets_dir(layout)}",
    ]
    if serving != SERVING_EMULATED:
        argv.append(f"--serving={serving}")
    return Component("kubelet-standin", argv, f"file://{layout.run / READY_FILE}", "none")


def gateway_component(layout: Layout, ports: Ports) -> Component:
    """The Service gateway: a Service's ready pods reachable from the host (``gateway.py``)."""
    argv = [
        sys.executable,
        "-m",
        "e2e.localcluster.gateway",
        f"--kubeconfig={layout.kubeconfig()}",
        f"--port={ports.gateway}",
    ]
    return Component("gateway", argv, f"http://127.0.0.1:{ports.gateway}/healthz", "none")


def _reset(layout: Layout) -> None:
    for directory in (
        layout.etcd_data,
        layout.logs,
        layout.pods,
        layout.run,
        layout.root / "certs",
        # The TSDB and the targets of pods that are gone with the old etcd.
        layout.prometheus,
    ):
        shutil.rmtree(directory, ignore_errors=True)
    layout.state.unlink(missing_ok=True)


def up(
    workdir: Path,
    *,
    fleet_spec: str = fleet.DEFAULT_SPEC,
    crds: Path | None = None,
    operator: bool = True,
    serving: str = SERVING_EMULATED,
    log: Log = print,
) -> Cluster:
    """Start (or reuse) the cluster in ``workdir``; return it once every part is ready.

    ``crds``: a directory of CRD manifests to install (None: none);
    ``operator=False`` leaves the operator out; ``serving``: how the kubelet
    stand-in plays serving pods (``standin.SERVING_MODES``; ``kwok``: KWOK's
    Ready alone, for a fleet benchmark; a reused cluster keeps its own).
    """
    if serving not in SERVING_MODES:
        raise ValueError(f"serving mode {serving!r}: want one of {', '.join(SERVING_MODES)}")
    layout = Layout(workdir.resolve())
    # A bad fleet spec or scrape interval fails before anything starts.
    fleet.parse_fleet(fleet_spec)
    prometheus.scrape_interval()
    if healthy(layout):
        cluster = Cluster(layout, State.load(layout.state))
        wait_nodes_ready(cluster.api(), register_fleet(cluster.api(), fleet_spec))
        log(f"dev: cluster in {layout.root} already running; reused")
        return cluster
    down(workdir, log=log)
    _reset(layout)
    layout.root.mkdir(parents=True, exist_ok=True)
    try:
        return _boot(layout, fleet_spec, crds, operator=operator, serving=serving, log=log)
    except BaseException:
        down(workdir, log=log)
        raise


def _boot(
    layout: Layout,
    fleet_spec: str,
    crds: Path | None,
    *,
    operator: bool,
    serving: str = SERVING_EMULATED,
    log: Log,
) -> Cluster:
    bins = Binaries.for_checkout()
    marker = str(layout.root)
    pki.create(layout.pki.dir)
    ports = Ports.pick()
    server = f"https://127.0.0.1:{ports.apiserver}"
    _write_kubeconfigs(layout, server)
    stages.write_config(layout.kwok_config, probed=serving == SERVING_EMULATED)
    _write_prometheus_config(layout, ports)
    layout.logs.mkdir(parents=True, exist_ok=True)
    audit.write_policy(layout.audit_policy)
    # Prometheus needs nothing from the API server (file SD): it starts beside etcd.
    first = [
        components.etcd(bins.path("etcd"), layout, ports),
        components.prometheus(bins.path("prometheus"), layout, ports),
    ]
    _start_all(first, layout, marker, log)
    apiserver = components.apiserver(bins.path("kube-apiserver"), layout, ports)
    _start_all([apiserver], layout, marker, log)
    selector = "=".join(fleet.KWOK_ANNOTATION)
    group = [
        components.controller_manager(bins.path("kube-controller-manager"), layout, ports),
        components.scheduler(bins.path("kube-scheduler"), layout, ports),
        components.kwok(bins.path("kwok"), layout, ports, node_selector=selector),
        standin_component(layout, serving),
        gateway_component(layout, ports),
    ]
    _start_all(group, layout, marker, log)
    cluster = Cluster(layout, State(ports, fleet_spec, server))
    api = cluster.api()
    wait_nodes_ready(api, register_fleet(api, fleet_spec))
    log(f"dev: fleet {fleet_spec} registered and Ready")
    if crds is not None:
        install_crds(bins.path("kubectl"), layout.kubeconfig(), crds, log)
    cluster.state.save(layout.state)
    if operator:
        start_operator(cluster, log=log)
    return cluster


def _write_prometheus_config(layout: Layout, ports: Ports) -> None:
    targets = prometheus.targets_dir(layout)
    targets.mkdir(parents=True, exist_ok=True)
    config = prometheus.render_config(
        targets=targets,
        self_address=f"127.0.0.1:{ports.prometheus}",
        interval=prometheus.scrape_interval(),
    )
    prometheus.write_config(components.prometheus_config(layout), config)


def start_operator(
    cluster: Cluster, *, log: Log = print, watched: str | None = None, **variant: Any
) -> None:
    """Start the operator against ``cluster`` under its own identity (``identity.py``);
    Prometheus scrapes its ``/metrics`` meanwhile. ``watched``: the namespaced mode
    (``--namespace``, a Role there), for that one namespace.

    ``variant``: ``operator_component``'s keywords, for a second operator (another
    name and ports; with ``kubeconfig_path``, an identity of the caller's making),
    which Prometheus does not scrape. It returns once the process is live, which,
    with leader election, may be while it stands by.
    """
    if variant.get("kubeconfig_path") is None:
        identity.install(cluster.api(), cluster.layout, cluster.state.server, watched)
    component = operator_component(cluster.layout, cluster.state.ports, watched, **variant)
    _start_all([component], cluster.layout, str(cluster.layout.root), log)
    if component.name != OPERATOR:
        return
    address = f"127.0.0.1:{cluster.state.ports.operator_metrics}"
    groups = prometheus.operator_target_groups(address)
    prometheus.write_targets(cluster.prometheus_targets, prometheus.OPERATOR_TARGETS, groups)


@contextmanager
def operator_running(
    cluster: Cluster, *, kubeconfig_path: Path | None = None, extra_args: Sequence[str] = ()
) -> Iterator[Cluster]:
    """The repository's CRDs installed and the operator running, stopped (and its scrape
    target withdrawn) on exit: what every operator test module needs around it.

    ``kubeconfig_path``, ``extra_args``: as in ``operator_component`` (default:
    ``identity.install``'s kubeconfig, no more flags)."""
    kubectl = Binaries.for_checkout().path("kubectl")
    install_crds(kubectl, cluster.kubeconfig, repo_root() / "crds", lambda _m: None)
    start_operator(
        cluster, log=lambda _m: None, kubeconfig_path=kubeconfig_path, extra_args=extra_args
    )
    try:
        yield cluster
    finally:
        stop(cluster, "operator")


def start_prometheus(cluster: Cluster, *, log: Log = print) -> None:
    """(Re)start the cluster's Prometheus on its port, with its data (after ``stop``)."""
    binary = Binaries.for_checkout().path("prometheus")
    component = components.prometheus(binary, cluster.layout, cluster.state.ports)
    _start_all([component], cluster.layout, str(cluster.layout.root), log)


def stop(cluster: Cluster, name: str) -> bool:
    """Stop one of the cluster's processes by its component name; False when none ran.

    Stopping the operator also withdraws its scrape target (``start_operator``).
    """
    found = [r for r in processes.read_records(cluster.layout.run) if r.name == name]
    for record in found:
        processes.stop(record)
    if name == "operator":
        prometheus.remove_targets(cluster.prometheus_targets, prometheus.OPERATOR_TARGETS)
    return bool(found)


def down(workdir: Path, *, log: Log = print) -> list[processes.Record]:
    """Stop everything started for ``workdir``; safe to call on a dead or absent cluster."""
    layout = Layout(workdir.resolve())
    stopped = processes.stop_all(layout.run, marker=str(layout.root))
    for record in stopped:
        log(f"dev: stopped {record.name} (pid {record.pid})")
    (layout.run / READY_FILE).unlink(missing_ok=True)
    return stopped
