"""The chaos lab: one cluster, the fault proxy, the operator behind it, and helpers.

A scenario gets a fresh namespace and a ``Lab``; the lab owns the operator's
process (killed and restarted by scenarios), the proxy's rules (cleared
after each scenario) and the deployments scenarios create (a one-pool
example on the emulated L40S nodes, which profiles in seconds).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from e2e.chaos import faults, identity, tls
from e2e.chaos.oracle import TELEMETRY_INTERVAL_S, Env
from e2e.chaos.proxy import FaultProxy
from e2e.localcluster import cluster as cluster_mod
from e2e.localcluster import processes
from e2e.localcluster.binaries import Binaries, repo_root
from e2e.localcluster.cluster import Cluster
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.operator.config import Config
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
EXAMPLE = repo_root() / "examples" / "specdeploy.yaml"
GPU = "NVIDIA-L40S"
L40S_NODES = ("gpu-l40s-0", "gpu-l40s-1")
NAME = "llama-8b-chat"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def sdep_path(namespace: str, name: str | None = None) -> str:
    return paths.path("SpeculativeDeployment", namespace, name)


def example(name: str = NAME, *, hold: str | None = None, discovery: bool = False) -> Obj:
    """The example on the L40S pool; ``hold``: a node label the profiler pod waits for.

    ``discovery``: no pools listed, the node selector restricting discovery to
    L40S nodes (so discovery mode is exercised on one GPU type).
    """
    body: Obj = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["telemetry"] = {"interval": f"{TELEMETRY_INTERVAL_S}s"}
    selector = {} if hold is None else {hold: "true"}
    if discovery:
        selector["nvidia.com/gpu.product"] = GPU
    else:
        body["spec"]["pools"] = [{"gpuType": GPU}]
    if selector:
        body["spec"]["nodeSelector"] = selector
    return body


@dataclass
class Lab:
    cluster: Cluster
    admin: KubeApi
    proxy: FaultProxy
    operator_kubeconfig: Path
    env: Env
    steady_s: float
    fleet: str
    holds: list[str] = field(default_factory=list)

    # --- the operator -------------------------------------------------------------

    def operator_alive(self) -> bool:
        try:
            return processes.alive(faults.record(self.cluster, "operator"))
        except LookupError:
            return False

    def kill_operator(self) -> None:
        faults.kill(self.cluster, "operator")

    def start_operator(self) -> None:
        cluster_mod.start_operator(
            self.cluster, kubeconfig_path=self.operator_kubeconfig, log=lambda _m: None
        )

    def ensure_operator(self) -> bool:
        """Start the operator if it is not running; whether it had to be started."""
        if self.operator_alive():
            return False
        self.start_operator()
        return True

    def operator_killer(self) -> Callable[[], None]:
        return faults.killer(self.cluster, "operator")

    # --- namespaces and deployments --------------------------------------------------

    def namespace(self, scenario: str) -> str:
        name = f"chaos-{scenario.lower().replace('_', '-')}-{uuid.uuid4().hex[:5]}"[:63]
        self.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for kind, obj in (("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")):
            path = paths.path(kind, namespace=name, name=obj)
            wait_for(partial(self.admin.get_or_none, path), what=f"{path}", timeout=30)
        return name

    def drop_namespace(self, namespace: str) -> None:
        try:
            self.admin.delete(paths.path("Namespace", name=namespace))
        except ApiError as err:
            if err.status != 404:
                raise

    def create(self, namespace: str, body: Obj) -> Obj:
        return self.admin.post(sdep_path(namespace), copy.deepcopy(body))

    def status(self, namespace: str, name: str = NAME) -> Obj:
        found: Obj = self.admin.get(sdep_path(namespace, name)).get("status") or {}
        return found

    def wait_phase(
        self, namespace: str, phase: str, *, name: str = NAME, timeout: float = 120
    ) -> Obj:
        def reached() -> Obj | None:
            current = self.status(namespace, name)
            return current if current.get("phase") == phase else None

        return wait_for(reached, what=f"{namespace}/{name} phase {phase}", timeout=timeout)

    def managed(self, kind: str, namespace: str) -> list[Obj]:
        return self.admin.items(
            paths.path(kind, namespace), labelSelector="app.kubernetes.io/managed-by=specdeploy"
        )

    @contextmanager
    def held(self, namespace: str) -> Iterator[str]:
        """A node label no node has yet (profiler pods wait until ``label_nodes`` sets it).

        The label stays on the nodes until ``release_holds`` (after the scenario is
        judged): the serving pods select it too, so removing it early would strand them.
        """
        label = f"specdeploy-chaos/{namespace}"[:63]
        self.holds.append(label)
        yield label

    def release_holds(self) -> None:
        while self.holds:
            self.label_nodes(self.holds.pop(), None)

    def label_nodes(
        self, label: str, value: str | None, nodes: tuple[str, ...] = L40S_NODES
    ) -> None:
        for node in nodes:
            try:
                self.admin.merge_patch(
                    paths.path("Node", name=node), {"metadata": {"labels": {label: value}}}
                )
            except ApiError as err:
                if err.status != 404:
                    raise

    def wait_api(self, timeout: float = 90) -> None:
        """Until the API server answers ``/readyz`` (plain text, not JSON: the harness probe)."""
        apiserver = faults.component(self.cluster, "kube-apiserver")
        wait_for(
            lambda: cluster_mod.probe(apiserver, self.cluster.layout),
            what="the API server to answer /readyz",
            timeout=timeout,
        )

    def revive_control_plane(self) -> list[str]:
        """Restart any control-plane component that died (not the operator); their names.

        A component that exits because another was killed is the cluster's trouble, not
        the operator's: it is restarted and noted, so that later scenarios run on a whole
        control plane.
        """
        revived = []
        for name in CONTROL_PLANE:
            try:
                dead = not processes.alive(faults.record(self.cluster, name))
            except LookupError:
                continue
            if dead:
                faults.restart(self.cluster, name)
                revived.append(name)
        if revived:
            self.wait_api()
        return revived


def open_lab(cluster: Cluster, *, steady_s: float, fleet: str) -> Lab:
    """The proxy started, the operator (re)started behind it under its own identity."""
    admin = cluster.api()
    cert, key = tls.proxy_certificate(cluster.layout.pki)
    proxy = FaultProxy(
        cluster.state.server, ca_file=cluster.layout.pki.ca_cert, cert_file=cert, key_file=key
    ).start()
    who = identity.operator_identity(admin, cluster.layout, server=proxy.url)
    cluster_mod.stop(cluster, "operator")
    kubectl = Binaries.for_checkout().path("kubectl")
    cluster_mod.install_crds(kubectl, cluster.kubeconfig, repo_root() / "crds", lambda _m: None)
    config = Config(prometheus_url=cluster.prometheus_url)
    env = Env(cluster, admin, who.user, config)
    lab = Lab(cluster, admin, proxy, who.kubeconfig, env, steady_s, fleet)
    lab.start_operator()
    time.sleep(1.0)
    return lab


def close_lab(lab: Lab) -> None:
    cluster_mod.stop(lab.cluster, "operator")
    lab.proxy.stop()
