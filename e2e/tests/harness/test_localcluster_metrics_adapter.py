"""The aggregation layer's pure parts: front-proxy PKI, the API server's requestheader flags,
the adapter's registration and command line, and reading its audit log."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from e2e.localcluster import components, metrics_adapter, pki
from e2e.localcluster.layout import Layout, Ports

PORTS = Ports(*range(20000, 20010))
LAYOUT = Layout(Path("/w"))


def _verifies(ca: Path, cert: Path) -> bool:
    done = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), str(cert)], capture_output=True, text=True
    )
    return done.returncode == 0


def test_the_front_proxy_client_is_signed_by_its_own_ca_and_not_the_cluster_ca(
    tmp_path: Path,
) -> None:
    made = pki.create(tmp_path / "pki")
    client = made.cert(pki.FRONT_PROXY_CLIENT)

    assert _verifies(made.front_proxy_ca_cert, client)
    assert not _verifies(made.ca_cert, client)
    subject = subprocess.run(
        ["openssl", "x509", "-in", str(client), "-noout", "-subject"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"CN={pki.FRONT_PROXY_CLIENT}" in subject.replace(" ", "")


def test_a_kept_pki_without_a_front_proxy_gets_one_and_keeps_its_cluster_ca(
    tmp_path: Path,
) -> None:
    made = pki.create(tmp_path / "pki")
    cluster_ca = made.ca_cert.read_bytes()
    for path in (made.front_proxy_ca_cert, made.cert(pki.FRONT_PROXY_CLIENT)):
        path.unlink()

    again = pki.create(tmp_path / "pki")

    assert again.ca_cert.read_bytes() == cluster_ca
    assert _verifies(again.front_proxy_ca_cert, again.cert(pki.FRONT_PROXY_CLIENT))


def test_the_apiserver_trusts_the_front_proxy_ca_and_proxies_with_its_client_cert() -> None:
    argv = components.apiserver(Path("/bin/kube-apiserver"), LAYOUT, PORTS).argv

    assert "--requestheader-client-ca-file=/w/pki/front-proxy-ca.crt" in argv
    assert "--requestheader-allowed-names=front-proxy-client" in argv
    assert "--requestheader-username-headers=X-Remote-User" in argv
    assert "--requestheader-group-headers=X-Remote-Group" in argv
    assert "--requestheader-extra-headers-prefix=X-Remote-Extra-" in argv
    assert "--proxy-client-cert-file=/w/pki/front-proxy-client.crt" in argv
    assert "--proxy-client-key-file=/w/pki/front-proxy-client.key" in argv


def test_the_hpa_controller_syncs_every_five_seconds() -> None:
    argv = components.controller_manager(Path("/bin/kcm"), LAYOUT, PORTS).argv

    assert "--horizontal-pod-autoscaler-sync-period=5s" in argv


def test_the_apiservice_routes_to_localhost_on_the_adapters_port_and_verifies_its_cert() -> None:
    service, api_service = metrics_adapter.registration_manifests(6443, b"CA PEM")

    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost"}
    spec = api_service["spec"]
    assert api_service["metadata"]["name"] == "v1beta2.custom.metrics.k8s.io"
    assert spec["service"] == {
        "name": service["metadata"]["name"],
        "namespace": "monitoring",
        "port": 6443,
    }
    assert spec["caBundle"] == "Q0EgUEVN"
    assert "insecureSkipTLSVerify" not in spec
    # The aggregator checks the serving cert against <service>.<namespace>.svc.
    assert "DNS:prometheus-adapter.monitoring.svc" in metrics_adapter.serving_sans()


def test_the_adapters_identity_has_the_delegation_grants_of_a_real_install() -> None:
    refs = {
        (m["kind"], m["roleRef"]["name"], m["metadata"].get("namespace"))
        for m in metrics_adapter.rbac_manifests()
        if "roleRef" in m
    }

    assert ("ClusterRoleBinding", "system:auth-delegator", None) in refs
    assert (
        "RoleBinding",
        "extension-apiserver-authentication-reader",
        "kube-system",
    ) in refs
    role = next(m for m in metrics_adapter.rbac_manifests() if m["kind"] == "ClusterRole")
    assert {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "watch"],
    } in role["rules"]


def test_the_adapter_listens_on_loopback_with_its_own_kubeconfig_and_audit_log() -> None:
    argv = metrics_adapter.component(
        Path("/bin/adapter"),
        LAYOUT,
        port=7443,
        prometheus_url="http://127.0.0.1:9090",
        config=Path("/w/rules.yaml"),
        kubeconfig_path=Path("/w/prometheus-adapter.kubeconfig"),
    ).argv

    assert "--bind-address=127.0.0.1" in argv and "--secure-port=7443" in argv
    for flag in ("lister", "authentication", "authorization"):
        assert f"--{flag}-kubeconfig=/w/prometheus-adapter.kubeconfig" in argv
    assert "--prometheus-url=http://127.0.0.1:9090/" in argv
    assert "--audit-log-path=/w/logs/prometheus-adapter-audit.log" in argv


def test_callers_reads_who_the_adapter_served_from_complete_events_only(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    events = [
        {"stage": "ResponseStarted", "user": {"username": "early"}, "verb": "get"},
        {
            "stage": "ResponseComplete",
            "user": {"username": metrics_adapter.HPA_USER},
            "verb": "get",
            "requestURI": "/apis/custom.metrics.k8s.io/v1beta2/x",
            "responseStatus": {"code": 200},
            "userAgent": "kube-controller-manager",
        },
    ]
    # The last line is one the adapter is still writing.
    log.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"stage": "Resp')

    calls = metrics_adapter.callers(log)

    assert calls == [
        metrics_adapter.Call(
            metrics_adapter.HPA_USER,
            "get",
            "/apis/custom.metrics.k8s.io/v1beta2/x",
            200,
            "kube-controller-manager",
        )
    ]
    assert metrics_adapter.callers(tmp_path / "absent.log") == []
