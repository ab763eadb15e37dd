"""The shared stdlib API client: credentials, one request, errors, helpers.

``http.client``'s connections are replaced by a fake that records what would
be sent and answers what the test told it to, so no socket is opened but the
refused one; TLS against a real kube-apiserver is the e2e tests' part.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.runtime import kubeapi
from specdeploy.runtime.kubeapi import ApiError, Client, Credentials


@dataclass
class Wire:
    """What reached the fake connection, and what it answers."""

    answer: tuple[int, bytes] = (200, b"{}")
    sent: list[dict[str, Any]] = field(default_factory=list)


class FakeResponse:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self._data = status, data

    def read(self) -> bytes:
        return self._data


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    record = Wire()

    class FakeConnection:
        def __init__(self, host: str, port: int, **options: Any) -> None:
            record.sent.append({"host": host, "port": port, **options})

        def request(self, method: str, target: str, body: Any, headers: dict[str, str]) -> None:
            record.sent[-1].update(method=method, target=target, body=body, headers=headers)

        def getresponse(self) -> FakeResponse:
            return FakeResponse(*record.answer)

        def close(self) -> None:
            record.sent[-1]["closed"] = True

    monkeypatch.setattr(http.client, "HTTPConnection", FakeConnection)
    monkeypatch.setattr(http.client, "HTTPSConnection", FakeConnection)
    return record


# --- requests ----------------------------------------------------------------


def test_a_request_sends_json_with_its_content_type_token_and_query(wire: Wire) -> None:
    wire.answer = (200, b'{"kind": "Pod"}')
    client = Client(Credentials(server="https://api.example:6443/prefix/", token="t"), timeout=7)
    answer = client.request(
        "PATCH",
        "/api/v1/pods/p",
        body={"a": 1},
        content_type=kubeapi.MERGE_PATCH,
        query=[("fieldManager", "me"), ("force", "true")],
    )
    assert answer == {"kind": "Pod"}
    (sent,) = wire.sent
    assert (sent["host"], sent["port"], sent["timeout"]) == ("api.example", 6443, 7)
    assert isinstance(sent["context"], ssl.SSLContext) and sent["closed"]
    assert sent["method"] == "PATCH"
    assert sent["target"] == "/prefix/api/v1/pods/p?fieldManager=me&force=true"
    assert sent["headers"] == {
        "Accept": "application/json",
        "Authorization": "Bearer t",
        "Content-Type": "application/merge-patch+json",
    }
    assert json.loads(sent["body"]) == {"a": 1}


def test_a_plain_http_server_gets_no_tls_and_no_body_sends_no_content_type(wire: Wire) -> None:
    wire.answer = (200, b"")
    client = Client(Credentials(server="http://127.0.0.1"))
    assert client.request("GET", "/x", query={"a": "b"}) == {}
    (sent,) = wire.sent
    assert (sent["port"], sent["target"], sent["body"]) == (80, "/x?a=b", None)
    assert "context" not in sent
    assert sent["headers"] == {"Accept": "application/json"}


def test_a_refusal_is_an_api_error_with_kubernetes_reason_and_message(wire: Wire) -> None:
    status = {"kind": "Status", "reason": "Forbidden", "message": "pods is forbidden"}
    wire.answer = (403, json.dumps(status).encode())
    with pytest.raises(ApiError) as info:
        Client(Credentials(server="https://x")).request("GET", "/api/v1/pods", query={"l": "x"})
    err = info.value
    assert (err.status, err.reason, err.message) == (403, "Forbidden", "pods is forbidden")
    assert str(err) == "GET /api/v1/pods?l=x: 403 Forbidden: pods is forbidden"


def test_exchange_answers_every_status_raw(wire: Wire) -> None:
    wire.answer = (503, b"<html>busy</html>")
    client = Client(Credentials(server="https://x"))
    assert client.exchange("GET", "/x") == (503, b"<html>busy</html>")


def test_a_body_that_is_no_status_is_the_whole_message() -> None:
    err = ApiError("GET", "/x", 502, "bad gateway")
    assert (err.reason, err.message) == ("", "bad gateway")
    assert str(err) == "GET /x: 502 : bad gateway"


def test_an_unreachable_server_raises_a_transport_error() -> None:
    client = Client(Credentials(server="http://127.0.0.1:9"), timeout=2.0)  # discard: refused
    with pytest.raises(kubeapi.TRANSPORT_ERRORS):
        client.exchange("GET", "/x")


def test_get_or_none_answers_none_for_404_only(wire: Wire) -> None:
    client = Client(Credentials(server="https://x"))
    wire.answer = (404, b'{"reason": "NotFound"}')
    assert kubeapi.get_or_none(client, "/x") is None
    wire.answer = (500, b"{}")
    with pytest.raises(ApiError):
        kubeapi.get_or_none(client, "/x")


def test_insecure_credentials_skip_verification() -> None:
    context = kubeapi._tls_context(Credentials(server="https://x", insecure=True))
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


# --- credentials ---------------------------------------------------------------


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ml"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}],
        "users": [{"name": "u", "user": user}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_kubeconfig_inline_data_becomes_private_files(tmp_path: Path) -> None:
    encoded = base64.b64encode(b"PEM").decode()
    path = _kubeconfig(
        tmp_path / "kubeconfig",
        {"certificate-authority-data": encoded},
        {"client-certificate-data": encoded, "client-key-data": encoded},
    )
    creds = Credentials.from_kubeconfig(path)
    assert creds.server == "https://127.0.0.1:6443"
    assert creds.key_file is not None and creds.key_file.read_bytes() == b"PEM"
    assert creds.key_file.stat().st_mode & 0o077 == 0
    assert creds.namespace == "ml"


def test_kubeconfig_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "kubeconfig",
        {"certificate-authority": "pki/ca.crt", "insecure-skip-tls-verify": True},
        {"tokenFile": "/abs/token"},
    )
    creds = Credentials.from_kubeconfig(path)
    assert creds.ca_file == tmp_path.resolve() / "pki" / "ca.crt"
    assert creds.token_file == Path("/abs/token") and creds.cert_file is None
    assert creds.insecure


def test_a_token_file_is_reread_on_every_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    creds = Credentials(server="https://x", token_file=token)
    assert creds.bearer() == "one"
    token.write_text("two\n")
    assert creds.bearer() == "two"
    token.unlink()
    assert creds.bearer() is None


def test_in_cluster_files_can_be_named_one_by_one(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not really a cert")
    env = {
        "SPECDEPLOY_KUBE_API": "http://127.0.0.1:8080/",
        "SPECDEPLOY_KUBE_TOKEN_FILE": str(tmp_path / "tok"),
        "SPECDEPLOY_KUBE_CA_FILE": str(tmp_path / "ca.pem"),
        "SPECDEPLOY_SERVICEACCOUNT_DIR": str(tmp_path / "missing"),
    }
    creds = kubeapi.in_cluster(env)
    assert creds == Credentials(
        server="http://127.0.0.1:8080",
        token_file=tmp_path / "tok",
        ca_file=tmp_path / "ca.pem",
    )
