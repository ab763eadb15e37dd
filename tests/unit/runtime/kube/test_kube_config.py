"""Where the server is and who we are: kubeconfigs, the pod's ServiceAccount, the search order.

Each identity is checked where it matters, on the wire: which server got
the request, with which token or client certificate, trusting which CA.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import pki
from specdeploy.runtime.kube.config import ConfigError, connect, from_kubeconfig, in_cluster
from tests.unit.runtime.kube.local_server import Server, write_kubeconfig


def kubeconfig(
    clusters: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
    contexts: dict[str, dict[str, Any]],
    current: str | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": c} for n, c in contexts.items()],
    }
    if current is not None:
        config["current-context"] = current
    return config


def two_contexts(first: Server, second: Server) -> dict[str, Any]:
    return kubeconfig(
        clusters={"one": {"server": first.url}, "two": {"server": second.url}},
        users={"alice": {"token": "alice-token"}, "bob": {"token": "bob-token"}},
        contexts={
            "dev": {"cluster": "one", "user": "alice", "namespace": "dev-ns"},
            "prod": {"cluster": "two", "user": "bob", "namespace": "prod-ns"},
        },
        current="dev",
    )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


# --- kubeconfigs -----------------------------------------------------------------


def test_a_named_context_picks_its_server_user_and_namespace(
    tmp_path: Path, server: Server, other_server: Server
) -> None:
    path = write_kubeconfig(tmp_path / "config", two_contexts(server, other_server))
    prod = from_kubeconfig(str(path), "prod")
    prod.request("GET", "/api")
    assert server.seen == []
    assert other_server.seen[0].headers["authorization"] == "Bearer bob-token"
    assert prod.namespace == "prod-ns"


def test_without_a_context_the_current_one_is_used(
    tmp_path: Path, server: Server, other_server: Server
) -> None:
    path = write_kubeconfig(tmp_path / "config", two_contexts(server, other_server))
    dev = from_kubeconfig(str(path))
    dev.request("GET", "/api")
    assert other_server.seen == []
    assert server.seen[0].headers["authorization"] == "Bearer alice-token"
    assert dev.namespace == "dev-ns"


def test_inline_base64_certificates_verify_the_server_and_identify_the_client(
    tmp_path: Path, tls_server: Server, cluster_pki: pki.Pki
) -> None:
    config = kubeconfig(
        clusters={
            "k": {"server": tls_server.url, "certificate-authority-data": _b64(cluster_pki.ca_cert)}
        },
        users={
            "admin": {
                "client-certificate-data": _b64(cluster_pki.cert("admin")),
                "client-key-data": _b64(cluster_pki.key("admin")),
            }
        },
        contexts={"c": {"cluster": "k", "user": "admin"}},
        current="c",
    )
    client = from_kubeconfig(str(write_kubeconfig(tmp_path / "config", config)))
    client.request("GET", "/api")
    assert tls_server.seen[0].client_cn == "specdeploy-admin"
    credentials = client.credentials()  # files, as kopf's login wants them
    assert credentials.ca_file is not None
    assert credentials.ca_file.read_bytes() == cluster_pki.ca_cert.read_bytes()
    assert credentials.scheme is None and credentials.token is None


def test_relative_file_paths_are_relative_to_the_kubeconfig(
    tmp_path: Path, tls_server: Server, cluster_pki: pki.Pki
) -> None:
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube" / "token").write_text("from-a-file\n")  # trimmed, as kubectl does
    config = kubeconfig(
        clusters={
            "k": {"server": tls_server.url, "certificate-authority": str(cluster_pki.ca_cert)}
        },
        users={"u": {"tokenFile": "token"}},
        contexts={"c": {"cluster": "k", "user": "u"}},
        current="c",
    )
    client = from_kubeconfig(str(write_kubeconfig(tmp_path / "kube" / "config", config)))
    client.request("GET", "/api")
    assert tls_server.seen[0].headers["authorization"] == "Bearer from-a-file"
    assert tls_server.seen[0].client_cn is None


def test_a_missing_kubeconfig_or_context_is_a_config_error(
    tmp_path: Path, server: Server, other_server: Server
) -> None:
    with pytest.raises(ConfigError, match="nowhere"):
        from_kubeconfig(str(tmp_path / "nowhere"))
    path = write_kubeconfig(tmp_path / "config", two_contexts(server, other_server))
    with pytest.raises(ConfigError, match="staging"):
        from_kubeconfig(str(path), "staging")


# --- in a pod --------------------------------------------------------------------


def service_account(directory: Path, *, token: str = "t", namespace: str = "ml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token + "\n")
    (directory / "namespace").write_text(namespace + "\n")
    return directory


def test_in_a_pod_the_service_account_token_ca_and_namespace_are_used(
    tmp_path: Path, tls_server: Server, cluster_pki: pki.Pki
) -> None:
    sa = service_account(tmp_path / "sa", token="pod-token", namespace="inference")
    (sa / "ca.crt").write_bytes(cluster_pki.ca_cert.read_bytes())
    port = tls_server.url.rsplit(":", 1)[1]
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": port,
        "SPECDEPLOY_SERVICEACCOUNT_DIR": str(sa),
    }
    client = in_cluster(env)
    assert client is not None and client.namespace == "inference"
    client.request("GET", "/api")  # verified against the ServiceAccount's CA
    assert tls_server.seen[0].headers["authorization"] == "Bearer pod-token"


def test_a_rotated_token_file_is_read_again_for_the_next_request(
    tmp_path: Path, server: Server
) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    client = in_cluster(
        {"SPECDEPLOY_KUBE_API": server.url, "SPECDEPLOY_KUBE_TOKEN_FILE": str(token)}
    )
    assert client is not None
    client.request("GET", "/api")
    token.write_text("two\n")  # the kubelet rotated the projected token
    client.request("GET", "/api")
    assert [s.headers["authorization"] for s in server.seen] == ["Bearer one", "Bearer two"]
    assert client.credentials().token == "two"  # what kopf's next login gets


def test_the_kubelets_service_address_is_bracketed_for_ipv6(tmp_path: Path) -> None:
    sa = service_account(tmp_path / "sa")
    (sa / "ca.crt").write_text("not read before a request")
    env = {
        "KUBERNETES_SERVICE_HOST": "fd00::1",
        "KUBERNETES_SERVICE_PORT": "6443",
        "SPECDEPLOY_SERVICEACCOUNT_DIR": str(sa),
    }
    client = in_cluster(env)
    assert client is not None
    credentials = client.credentials()
    assert credentials.server == "https://[fd00::1]:6443"
    assert credentials.ca_file == sa / "ca.crt"
    assert (credentials.token, credentials.namespace) == ("t", "ml")


def test_the_stand_ins_overrides_name_the_server_and_each_file(tmp_path: Path) -> None:
    service_account(tmp_path / "sa", token="from-the-directory")
    (tmp_path / "tok").write_text("from-the-override")
    (tmp_path / "ca.pem").write_text("not read before a request")
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "SPECDEPLOY_KUBE_API": "http://127.0.0.1:8080/",
        "SPECDEPLOY_SERVICEACCOUNT_DIR": str(tmp_path / "sa"),
        "SPECDEPLOY_KUBE_TOKEN_FILE": str(tmp_path / "tok"),
        "SPECDEPLOY_KUBE_CA_FILE": str(tmp_path / "ca.pem"),
    }
    client = in_cluster(env)
    assert client is not None
    credentials = client.credentials()
    assert credentials.server == "http://127.0.0.1:8080"
    assert credentials.token == "from-the-override"
    assert credentials.ca_file == tmp_path / "ca.pem"
    assert credentials.namespace == "ml"  # the directory still holds the namespace


def test_outside_a_pod_there_is_no_in_cluster_client() -> None:
    assert in_cluster({}) is None
    assert in_cluster({"KUBERNETES_SERVICE_PORT": "443"}) is None


# --- the search order -------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home directory: no ~/.kube/config unless a test writes one."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def single(server: Server, token: str) -> dict[str, Any]:
    return kubeconfig(
        clusters={token: {"server": server.url}},
        users={token: {"token": token}},
        contexts={token: {"cluster": token, "user": token}},
        current=token,
    )


def pod_env(server: Server) -> dict[str, str]:
    return {"SPECDEPLOY_KUBE_API": server.url, "SPECDEPLOY_SERVICEACCOUNT_DIR": "/nowhere"}


def test_an_explicit_kubeconfig_comes_before_the_environment(
    tmp_path: Path, home: Path, server: Server, other_server: Server
) -> None:
    explicit = write_kubeconfig(tmp_path / "explicit", single(server, "explicit"))
    listed = write_kubeconfig(tmp_path / "listed", single(other_server, "listed"))
    client = connect(explicit, env={"KUBECONFIG": str(listed), **pod_env(other_server)})
    assert client.credentials().token == "explicit"


def test_kubeconfig_lists_are_merged_and_come_before_the_pod(
    tmp_path: Path, home: Path, server: Server, other_server: Server
) -> None:
    first = write_kubeconfig(tmp_path / "first", single(server, "first"))
    second = write_kubeconfig(tmp_path / "second", single(other_server, "second"))
    env = {"KUBECONFIG": f"{first}{os.pathsep}{second}", **pod_env(other_server)}
    assert connect(env=env).credentials().token == "first"  # the first file's current context
    connect(context="second", env=env).request("GET", "/api")  # a context of the second file
    assert other_server.seen[0].headers["authorization"] == "Bearer second"


def test_the_pod_comes_before_the_home_kubeconfig(
    home: Path, server: Server, other_server: Server
) -> None:
    (home / ".kube").mkdir()
    write_kubeconfig(home / ".kube" / "config", single(other_server, "home"))
    assert connect(env=pod_env(server)).credentials().server == server.url
    # A context only exists in a kubeconfig: naming one skips the pod.
    assert connect(context="home", env=pod_env(server)).credentials().token == "home"


def test_with_nothing_to_connect_to_the_error_says_where_it_looked(home: Path) -> None:
    with pytest.raises(ConfigError, match=str(home / ".kube" / "config")):
        connect(env={})
