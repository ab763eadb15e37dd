"""The work directory of one local cluster, and the ports it listens on.

Everything a running cluster needs to be found and stopped again lives in one
directory: PKI, kubeconfigs, etcd data, component logs, PID files and
``cluster.json`` (ports and fleet), Prometheus' config, data and file-SD
targets. Two clusters never share a directory, so
the pytest cluster and a developer's ``dev up`` can run side by side.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from e2e.localcluster.pki import Pki


@dataclass(frozen=True)
class Ports:
    """Free loopback ports, chosen at start-up."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    operator: int
    prometheus: int
    gateway: int
    """The Service gateway (``gateway.py``)."""
    operator_metrics: int
    """The operator's ``/metrics`` (``--metrics-port``), scraped as job ``specdeploy-operator``."""

    @classmethod
    def pick(cls) -> Ports:
        """Ask the kernel for free ports. Racy by nature; a lost race shows in a component's log."""
        socks = [socket.socket() for _ in fields(cls)]
        try:
            for sock in socks:
                sock.bind(("127.0.0.1", 0))
            return cls(*(sock.getsockname()[1] for sock in socks))
        finally:
            for sock in socks:
                sock.close()


@dataclass(frozen=True)
class Layout:
    """Paths inside a cluster's work directory."""

    root: Path

    @property
    def pki(self) -> Pki:
        return Pki(self.root / "pki")

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def pods(self) -> Path:
        """Where the kubelet stand-in materialises pods (volumes, tokens, logs)."""
        return self.root / "pods"

    @property
    def prometheus(self) -> Path:
        """Prometheus' config, TSDB (``data/``) and file-SD targets (``targets/``)."""
        return self.root / "prometheus"

    @property
    def state(self) -> Path:
        return self.root / "cluster.json"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    def kubeconfig(self, user: str = "admin") -> Path:
        return self.root / ("kubeconfig" if user == "admin" else f"{user}.kubeconfig")

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log of writes (JSON lines; ``audit.py`` reads it)."""
        return self.logs / "audit.log"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def certs(self, component: str) -> Path:
        """A component's own --cert-dir (self-signed serving certs it generates)."""
        return self.root / "certs" / component


class StateMismatch(ValueError):
    """``cluster.json`` was written by a harness with other fields (an older checkout)."""


@dataclass(frozen=True)
class State:
    """What ``cluster.json`` records about a started cluster."""

    ports: Ports
    fleet: str
    server: str

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    def save(self, path: Path) -> None:
        # The URL is derived, but written too, for scripts that read the file.
        path.write_text(
            json.dumps({**asdict(self), "prometheus_url": self.prometheus_url}, indent=2)
        )

    @classmethod
    def load(cls, path: Path) -> State:
        raw = json.loads(path.read_text())
        try:
            return cls(Ports(**raw["ports"]), raw["fleet"], raw["server"])
        except (KeyError, TypeError) as err:
            raise StateMismatch(f"{path}: {err}") from err
