"""Command lines of the local cluster's components, and where each says it is ready.

Pure: (binaries, layout, ports) -> argv. Flags follow what kwokctl's binary
runtime passes (sigs.k8s.io/kwok pkg/kwokctl/components) with the local
differences spelled out where they matter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from e2e.localcluster.layout import Layout, Ports
from e2e.localcluster.pki import FRONT_PROXY_CLIENT

# The first address of this range is the `kubernetes` Service (a SAN in pki.py). A /16:
# the fleet benchmark's 500 deployments need a Service each (a /24 ran out at 253).
SERVICE_CIDR = "10.0.0.0/16"
POD_CIDR = "10.244.0.1/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
ALWAYS_ALLOW = "/healthz,/readyz,/livez,/metrics"


@dataclass(frozen=True)
class Component:
    """One process to start; ``ready_url`` answers 200 once it serves.

    ``tls`` is "none" (plain HTTP), "verify" (the cluster CA, admin cert) or
    "self-signed" (the component made its own serving cert; health paths are
    always allowed, so no verification or identity is needed to probe them).
    """

    name: str
    argv: list[str]
    ready_url: str
    tls: str
    env: Mapping[str, str] = field(default_factory=dict)


def etcd(binary: Path, layout: Layout, ports: Ports) -> Component:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    argv = [
        str(binary),
        "--name=node0",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=node0={peer}",
        # A throw-away test store: durability buys nothing and fsync costs seconds.
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        "--log-level=warn",
    ]
    return Component("etcd", argv, f"{client}/health", "none")


def apiserver(binary: Path, layout: Layout, ports: Ports) -> Component:
    pki = layout.pki
    argv = [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        # Without an explicit advertise address the server looks for a default
        # route and dies on hosts that have none.
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.cert('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--cert-dir={layout.certs('kube-apiserver')}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        # The endpoint reconciler would publish 127.0.0.1 for the `kubernetes`
        # Service, which Endpoints validation rejects (loopback).
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        # An owner reference that blocks its owner's deletion needs `update` on the
        # owner's finalizers: what a production API server with this plugin checks,
        # and why the operator's ClusterRole holds it (identity.GRANTED_WITHOUT_A_REQUEST).
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
        # Writes, and every request of the operator's own identity, at Metadata level
        # (who did what, no bodies): write counts per client and least privilege
        # (``audit.py``).
        f"--audit-policy-file={layout.audit_policy}",
        f"--audit-log-path={layout.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=2",
        # The aggregation layer (prometheus-adapter's custom.metrics.k8s.io): the API
        # server calls aggregated servers with the front proxy's client certificate
        # and names the caller in these headers; an aggregated server reads the CA and
        # the header names from kube-system's extension-apiserver-authentication.
        f"--requestheader-client-ca-file={pki.front_proxy_ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.cert(FRONT_PROXY_CLIENT)}",
        f"--proxy-client-key-file={pki.key(FRONT_PROXY_CLIENT)}",
    ]
    return Component(
        "kube-apiserver", argv, f"https://127.0.0.1:{ports.apiserver}/readyz", "verify"
    )


def controller_manager(binary: Path, layout: Layout, ports: Ports) -> Component:
    kubeconfig = layout.kubeconfig("controller-manager")
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--authorization-always-allow-paths={ALWAYS_ALLOW}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={layout.certs('kube-controller-manager')}",
        "--leader-elect=false",
        # Each controller acts as its own ServiceAccount, so RBAC is exercised
        # the way a real control plane exercises it.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={layout.pki.sa_key}",
        f"--root-ca-file={layout.pki.ca_cert}",
        "--controllers=*",
        # The HPA controller's loop (default 15 s): tests see a scale within seconds.
        "--horizontal-pod-autoscaler-sync-period=5s",
        # EMULATION: one KWOK process renews every node's Lease. With 2,000 nodes on a
        # loaded 2-core box some renewals come later than the default 50 s grace, the
        # node lifecycle controller marks the node's pods not Ready, and KWOK, whose
        # stages have already run, never makes them Ready again: the fleet benchmark
        # saw 19 of 100 deployments stuck so. A real kubelet's late heartbeat is its
        # own; here it is the emulator's, so the grace is longer than any such delay.
        "--node-monitor-grace-period=10m",
    ]
    url = f"https://127.0.0.1:{ports.controller_manager}/healthz"
    return Component("kube-controller-manager", argv, url, "self-signed")


def scheduler(binary: Path, layout: Layout, ports: Ports) -> Component:
    kubeconfig = layout.kubeconfig("scheduler")
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--authorization-always-allow-paths={ALWAYS_ALLOW}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={layout.certs('kube-scheduler')}",
        "--leader-elect=false",
    ]
    url = f"https://127.0.0.1:{ports.scheduler}/healthz"
    return Component("kube-scheduler", argv, url, "self-signed")


def kwok(binary: Path, layout: Layout, ports: Ports, *, node_selector: str) -> Component:
    argv = [
        str(binary),
        f"--kubeconfig={layout.kubeconfig()}",
        # Without --config stages kwok exits with "no stages found".
        f"--config={layout.kwok_config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={node_selector}",
        f"--cidr={POD_CIDR}",
        "--node-ip=10.244.0.1",
        f"--node-port={ports.kwok}",
        f"--server-address=127.0.0.1:{ports.kwok}",
        # KWOK renews a Lease per node, so the node lifecycle controller sees
        # healthy kubelets and never taints or evicts.
        "--node-lease-duration-seconds=40",
    ]
    return Component("kwok", argv, f"http://127.0.0.1:{ports.kwok}/healthz", "none")


PROMETHEUS_RETENTION = ("2d", "1GB")
"""TSDB retention (time, size): a local cluster's store stays bounded however long it runs."""


def prometheus(binary: Path, layout: Layout, ports: Ports) -> Component:
    """Prometheus 3 on loopback; its config is ``<workdir>/prometheus/prometheus.yml``."""
    listen = f"127.0.0.1:{ports.prometheus}"
    retention_time, retention_size = PROMETHEUS_RETENTION
    argv = [
        str(binary),
        f"--config.file={prometheus_config(layout)}",
        f"--storage.tsdb.path={layout.prometheus / 'data'}",
        f"--storage.tsdb.retention.time={retention_time}",
        f"--storage.tsdb.retention.size={retention_size}",
        f"--web.listen-address={listen}",
        "--log.level=warn",
    ]
    return Component("prometheus", argv, f"http://{listen}/-/ready", "none")


def prometheus_config(layout: Layout) -> Path:
    return layout.prometheus / "prometheus.yml"
