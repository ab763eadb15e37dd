"""prometheus-adapter in the local cluster: ``custom.metrics.k8s.io`` from the cluster's Prometheus.

The real HPA controller (in kube-controller-manager) reads custom metrics
only through the aggregation layer, so this module runs the whole chain a
real install has, as local processes on loopback:

* the adapter (v0.12.0, ``e2e/build/prometheus-adapter``) under its own
  ServiceAccount, ``monitoring/prometheus-adapter``, with the RBAC its upstream
  manifests give it: ``system:auth-delegator`` (TokenReviews and
  SubjectAccessReviews for its callers), the ``extension-apiserver-authentication-reader``
  Role in ``kube-system`` (the ConfigMap that names the front proxy's CA and
  headers) and reads of the resources its rules map series to;
* a serving certificate signed by the cluster CA for the name the aggregator
  verifies (``<service>.<namespace>.svc``), so the APIService carries a
  ``caBundle`` and no ``insecureSkipTLSVerify``;
* a Service ``type: ExternalName, externalName: localhost`` and the APIService
  ``v1beta2.custom.metrics.k8s.io`` on the adapter's port. The aggregator
  resolves an ExternalName Service to ``https://<externalName>:<port>``;
  Endpoints cannot hold loopback addresses and there is no kube-proxy here.

The aggregator calls the adapter with the front proxy's client certificate
(``pki.FRONT_PROXY_CLIENT``) and names the caller in ``X-Remote-User``, so the
adapter authorizes the HPA controller's own ServiceAccount, never
``system:anonymous``. The HPA controller needs no extra RBAC: its bootstrap
ClusterRole ``system:controller:horizontal-pod-autoscaler`` already allows
get/list/watch on ``custom.metrics.k8s.io`` (``hpa_may_read_custom_metrics``
checks it with a SubjectAccessReview).

``running`` is the context manager a test uses on a session cluster; the
process carries the cluster's marker and PID file, so ``cluster.down`` stops
it too. On exit the APIService goes first: an APIService whose backend is
gone fails discovery (``kubectl``, ``helm``) for every later client.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.localcluster import kubeconfig, pki, processes
from e2e.localcluster.binaries import Binaries
from e2e.localcluster.cluster import Cluster, Log, probe
from e2e.localcluster.components import Component
from e2e.localcluster.identity import TOKEN_SECONDS
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.layout import Layout
from e2e.localcluster.waiting import wait_for
from specdeploy.chart.adapter_rules import adapter_rules
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import APPLY_PATCH

NAME = "prometheus-adapter"
"""The component, its ServiceAccount, Service, ClusterRole and certificate files."""
NAMESPACE = "monitoring"
USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"
GROUP = "custom.metrics.k8s.io"
VERSION = "v1beta2"
API_SERVICE = f"{VERSION}.{GROUP}"
API_SERVICE_PATH = f"/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}"
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
"""The HPA controller's identity (kube-controller-manager --use-service-account-credentials)."""
FIELD_MANAGER = "specdeploy-localcluster"
AVAILABLE_TIMEOUT = 90.0
RELIST_INTERVAL = "5s"
"""How often the adapter re-lists series (default 10 m): a new series is servable in seconds."""
MAX_AGE = "1m"
RESOURCE_READS = (
    {"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
)
"""What the rules map series to (``adapter_rules``: namespaces, deployments.apps) and pods,
as the upstream ClusterRole has them."""

_RBAC = "rbac.authorization.k8s.io"
_CLUSTER_PATHS = {
    "APIService": "/apis/apiregistration.k8s.io/v1/apiservices",
}
"""Kinds the shared path table (``specdeploy.runtime.kube.paths``) does not hold."""


@dataclass(frozen=True)
class MetricsAdapter:
    """A running adapter: its port (the APIService's), its rules file, its log and its
    audit log (``callers`` reads it)."""

    port: int
    config: Path
    log: Path
    audit_log: Path


# ---- manifests (pure) -------------------------------------------------------


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": _RBAC, "kind": kind, "name": name}


def _subject() -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]


def _binding(
    kind: str, name: str, role_kind: str, role: str, ns: str | None = None
) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": ns} if ns else {})}
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": _ref(role_kind, role),
        "subjects": _subject(),
    }


def rbac_manifests() -> list[dict[str, Any]]:
    """The adapter's namespace, ServiceAccount and grants, in creation order."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
        },
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME},
            "rules": [dict(rule) for rule in RESOURCE_READS],
        },
        _binding("ClusterRoleBinding", NAME, "ClusterRole", NAME),
        _binding(
            "ClusterRoleBinding", f"{NAME}:auth-delegator", "ClusterRole", "system:auth-delegator"
        ),
        _binding(
            "RoleBinding",
            f"{NAME}:auth-reader",
            "Role",
            "extension-apiserver-authentication-reader",
            ns="kube-system",
        ),
    ]


def registration_manifests(port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The ExternalName Service and the APIService that route the group to ``port``."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"name": NAME, "namespace": NAMESPACE, "port": port},
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 200,
        },
    }
    return [service, api_service]


def serving_sans() -> list[str]:
    """The aggregator verifies ``<service>.<namespace>.svc``; loopback for direct probes."""
    return [f"DNS:{NAME}.{NAMESPACE}.svc", "DNS:localhost", "IP:127.0.0.1"]


def component(
    binary: Path,
    layout: Layout,
    *,
    port: int,
    prometheus_url: str,
    config: Path,
    kubeconfig_path: Path,
) -> Component:
    """The adapter's command line: loopback only, its own identity for all three clients."""
    argv = [
        str(binary),
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--tls-cert-file={layout.pki.cert(NAME)}",
        f"--tls-private-key-file={layout.pki.key(NAME)}",
        # Unused while the two files above are given; where a self-signed pair would go.
        f"--cert-dir={layout.certs(NAME)}",
        f"--lister-kubeconfig={kubeconfig_path}",
        f"--authentication-kubeconfig={kubeconfig_path}",
        f"--authorization-kubeconfig={kubeconfig_path}",
        f"--prometheus-url={prometheus_url}/",
        f"--config={config}",
        f"--metrics-relist-interval={RELIST_INTERVAL}",
        # The window a re-list looks back over (default: the relist interval); longer,
        # so a slower scrape (SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL) never hides a series.
        f"--metrics-max-age={MAX_AGE}",
        # The adapter's own audit log: the user it authenticated for each request
        # (``callers``), which is how a test tells the forwarded identity from anonymous.
        f"--audit-policy-file={audit_policy(layout)}",
        f"--audit-log-path={audit_log(layout)}",
        "--audit-log-format=json",
        "--audit-log-maxsize=50",
        "--audit-log-maxbackup=1",
    ]
    return Component(NAME, argv, f"https://127.0.0.1:{port}/healthz", "verify")


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*"]},
        {"level": "Metadata"},
    ],
}
"""Every request but health probes, at Metadata level (who, verb, URI, status; no bodies)."""


def audit_policy(layout: Layout) -> Path:
    return layout.root / f"{NAME}-audit-policy.yaml"


def audit_log(layout: Layout) -> Path:
    return layout.logs / f"{NAME}-audit.log"


@dataclass(frozen=True)
class Call:
    """One request the adapter served, as its audit log has it."""

    user: str
    verb: str
    uri: str
    code: int
    user_agent: str


def callers(log: Path) -> list[Call]:
    """The adapter's audit events (ResponseComplete), oldest first; [] before the first."""
    if not log.exists():
        return []
    calls = []
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line the adapter is writing now
        if event.get("stage") != "ResponseComplete":
            continue
        code = int(event.get("responseStatus", {}).get("code", 0))
        user = event.get("user", {}).get("username", "")
        uri, agent = event.get("requestURI", ""), event.get("userAgent", "")
        calls.append(Call(user, event.get("verb", ""), uri, code, agent))
    return calls


# ---- effects -----------------------------------------------------------------


def _object_path(obj: Mapping[str, Any]) -> str:
    collection = _CLUSTER_PATHS.get(str(obj["kind"]))
    if collection is None:
        return paths.object_path(obj)
    return f"{collection}/{obj['metadata']['name']}"


def apply(api: KubeApi, obj: Mapping[str, Any]) -> None:
    """Server-side apply (idempotent: a second session's apply changes nothing)."""
    query = {"fieldManager": FIELD_MANAGER, "force": "true"}
    api.request("PATCH", _object_path(obj), body=obj, content_type=APPLY_PATCH, query=query)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serving_cert(layout: Layout) -> None:
    if layout.pki.cert(NAME).exists():
        return
    extensions = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth",
        "subjectAltName=" + ",".join(serving_sans()),
    ]
    pki.sign(layout.pki, NAME, f"/CN={NAME}", extensions)


def _write_kubeconfig(api: KubeApi, cluster: Cluster) -> Path:
    token = api.request_token(NAMESPACE, NAME, seconds=TOKEN_SECONDS)
    target = cluster.layout.kubeconfig(NAME)
    token_file = target.with_suffix(".token")
    token_file.write_text(token)
    token_file.chmod(0o600)
    doc = kubeconfig.document(
        server=cluster.state.server,
        ca_file=cluster.layout.pki.ca_cert,
        user=NAME,
        token_file=token_file,
    )
    return kubeconfig.write(target, doc)


PROBE_USER = "specdeploy-localcluster-probe"
"""The caller ``front_proxy_accepted`` names, and its User-Agent."""


def front_proxy_accepted(layout: Layout, port: int) -> bool:
    """The adapter authenticates the front proxy: a discovery request with the proxy's
    certificate, naming a ``system:masters`` caller in the headers, answers 200.

    The adapter loads the front proxy's CA from kube-system's
    ``extension-apiserver-authentication`` ConfigMap after it starts serving;
    until then the aggregator's requests reach it as ``system:anonymous`` and get
    403. Registering only after this holds keeps those out of its audit log.
    """
    context = ssl.create_default_context(cafile=str(layout.pki.ca_cert))
    client = pki.FRONT_PROXY_CLIENT
    context.load_cert_chain(str(layout.pki.cert(client)), str(layout.pki.key(client)))
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
    headers = {
        "X-Remote-User": PROBE_USER,
        "X-Remote-Group": "system:masters",
        # Until the CA is loaded this probe is anonymous itself; its agent tells it apart.
        "User-Agent": PROBE_USER,
    }
    try:
        conn.request("GET", f"/apis/{GROUP}/{VERSION}", headers=headers)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def available(api: KubeApi) -> bool:
    """The APIService's Available condition is True (the aggregator reached the adapter)."""
    found = api.get_or_none(API_SERVICE_PATH)
    conditions = (found or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def start(
    cluster: Cluster, *, rules: Mapping[str, Any] | None = None, log: Log = print
) -> MetricsAdapter:
    """Start the adapter with ``rules`` (default ``adapter_rules()``), register it, and
    return once the APIService is Available."""
    layout, api = cluster.layout, cluster.api()
    for obj in rbac_manifests():
        apply(api, obj)
    _serving_cert(layout)
    audit_policy(layout).write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    config = layout.root / f"{NAME}.yaml"
    config.write_text(yaml.safe_dump(dict(rules or adapter_rules()), sort_keys=False))
    port = _free_port()
    spec = component(
        Binaries.for_checkout().path("adapter"),
        layout,
        port=port,
        prometheus_url=cluster.prometheus_url,
        config=config,
        kubeconfig_path=_write_kubeconfig(api, cluster),
    )
    record = processes.spawn(
        spec.name,
        spec.argv,
        run_dir=layout.run,
        log_dir=layout.logs,
        marker=str(layout.root),
        env=dict(os.environ),
    )
    log_path = layout.log(NAME)
    processes.wait_ready(record, lambda: probe(spec, layout), log=log_path, timeout=60.0)
    try:
        processes.wait_ready(
            record, lambda: front_proxy_accepted(layout, port), log=log_path, timeout=60.0
        )
    except processes.ComponentFailed as err:
        raise processes.ComponentFailed(
            f"{NAME} does not accept the front proxy's certificate: is kube-apiserver started"
            f" with --requestheader-client-ca-file (components.apiserver)? {err}"
        ) from err
    for obj in registration_manifests(port, layout.pki.ca_cert.read_bytes()):
        apply(api, obj)
    wait_for(
        lambda: available(api),
        what=f"APIService {API_SERVICE} Available",
        timeout=AVAILABLE_TIMEOUT,
    )
    log(f"dev: {NAME} serving {API_SERVICE} on 127.0.0.1:{port} (pid {record.pid})")
    return MetricsAdapter(port, config, log_path, audit_log(layout))


def stop(cluster: Cluster) -> None:
    """Withdraw the APIService and the Service, then stop the process."""
    api = cluster.api()
    for path in (API_SERVICE_PATH, paths.path("Service", NAMESPACE, NAME)):
        if api.get_or_none(path) is not None:
            api.delete(path)
    for record in processes.read_records(cluster.layout.run):
        if record.name == NAME:
            processes.stop(record)
            processes.pid_file(cluster.layout.run, NAME).unlink(missing_ok=True)


@contextmanager
def running(
    cluster: Cluster, *, rules: Mapping[str, Any] | None = None, log: Log = print
) -> Iterator[MetricsAdapter]:
    """The adapter serving ``custom.metrics.k8s.io`` for the block, withdrawn afterwards."""
    try:
        yield start(cluster, rules=rules, log=log)
    finally:
        stop(cluster)


def hpa_may_read_custom_metrics(api: KubeApi, resource: str = "deployments.apps") -> bool:
    """A SubjectAccessReview: may the HPA controller get ``resource`` in the custom metrics API?"""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": HPA_USER,
            "resourceAttributes": {"group": GROUP, "resource": resource, "verb": "get"},
        },
    }
    answer = api.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer.get("status", {}).get("allowed"))
