"""The shared client on the wire: requests, content types, errors, retries, identities.

Every test talks to a real HTTP server on 127.0.0.1 (``conftest.py``)
through the official client's transport, so what is checked is what a
kube-apiserver would receive; TLS against the real kube-apiserver is the
cluster tests' part.
"""

from __future__ import annotations

import socket

import pytest

from specdeploy.runtime.kube.client import (
    TRANSPORT_ERRORS,
    ApiError,
    Client,
    Unreachable,
    get_or_none,
)
from specdeploy.runtime.kube.config import in_cluster
from specdeploy.runtime.kube.requests import APPLY_PATCH, JSON_PATCH, MERGE_PATCH
from tests.unit.runtime.kube.local_server import Server


def client_for(url: str, token: str | None = "t") -> Client:
    """A pod's client pointed at ``url`` with a fixed token (``$SPECDEPLOY_KUBE_API``)."""
    client = in_cluster({"SPECDEPLOY_KUBE_API": url, "SPECDEPLOY_SERVICEACCOUNT_DIR": "/nowhere"})
    assert client is not None
    return client.with_token(token)


# --- what goes on the wire ------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (MERGE_PATCH, {"status": {"phase": None}}),
        (APPLY_PATCH, {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}}),
        (JSON_PATCH, [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}]),
    ],
    ids=["merge-patch", "server-side-apply", "json-patch"],
)
def test_a_patch_is_sent_as_json_with_its_own_content_type(
    server: Server, content_type: str, body: object
) -> None:
    client_for(server.url).request("PATCH", "/api/v1/x", body=body, content_type=content_type)
    (seen,) = server.seen
    assert seen.headers["content-type"] == content_type
    assert seen.json() == body


def test_an_apply_of_a_character_beyond_the_bmp_reaches_the_yaml_decoder_readable(
    server: Server,
) -> None:
    """Found by the fuzzer: the apply body was ASCII-escaped JSON, so an emoji in a model
    name or an annotation became a surrogate pair of escapes, which the API server's
    YAML decoder refuses (400), and every apply of that Deployment failed."""
    import yaml

    body = {"metadata": {"annotations": {"note": "\U0001f916 caf\u00e9 \x93"}}}
    client_for(server.url).request("PATCH", "/api/v1/x", body=body, content_type=APPLY_PATCH)
    (seen,) = server.seen
    assert b"\\ud83e" not in seen.body, "no surrogate escapes"
    assert "\U0001f916".encode() in seen.body, "sent as UTF-8"
    assert b"\\u0093" in seen.body, "a C1 control, which YAML cannot hold raw, is escaped"
    assert yaml.safe_load(seen.body.decode()) == body


def test_a_request_carries_its_token_query_and_the_callers_name(server: Server) -> None:
    server.answer(200, {"kind": "Pod"})
    answer = client_for(server.url, token="s3cret").request(
        "GET", "/api/v1/pods", query=[("labelSelector", "a=b,c=d"), ("limit", "5")]
    )
    assert answer == {"kind": "Pod"}
    (seen,) = server.seen
    assert (seen.method, seen.path) == ("GET", "/api/v1/pods")
    assert seen.query == [("labelSelector", "a=b,c=d"), ("limit", "5")]
    assert seen.headers["authorization"] == "Bearer s3cret"
    assert seen.headers["accept"] == "application/json"
    assert seen.headers["user-agent"] == "specdeploy"
    assert "content-type" not in seen.headers and seen.body == b""


def test_a_delete_sends_its_options_as_a_json_body(server: Server) -> None:
    options = {"propagationPolicy": "Background", "preconditions": {"uid": "u"}}
    client_for(server.url).request("DELETE", "/api/v1/namespaces/ns/pods/p", body=options)
    (seen,) = server.seen
    assert seen.headers["content-type"] == "application/json" and seen.json() == options


def test_a_json_patch_that_is_not_a_list_is_refused_before_sending(server: Server) -> None:
    # The official REST layer would send it as a strategic merge patch instead.
    with pytest.raises(ValueError, match="list of operations"):
        client_for(server.url).request("PATCH", "/x", body={"a": 1}, content_type=JSON_PATCH)
    assert server.seen == []


def test_a_client_without_a_token_sends_no_authorization(server: Server) -> None:
    client_for(server.url, token=None).request("GET", "/api")
    assert "authorization" not in server.seen[0].headers


# --- answers and errors -----------------------------------------------------------


def test_a_refusal_is_an_api_error_with_the_status_reason_and_message(server: Server) -> None:
    server.answer(403, {"kind": "Status", "reason": "Forbidden", "message": "pods is forbidden"})
    with pytest.raises(ApiError) as info:
        client_for(server.url).request("GET", "/api/v1/pods", query={"l": "x"})
    err = info.value
    assert (err.status, err.reason, err.message) == (403, "Forbidden", "pods is forbidden")
    assert str(err) == "GET /api/v1/pods?l=x: 403 Forbidden: pods is forbidden"


def test_an_error_body_that_is_no_status_is_the_whole_message(server: Server) -> None:
    server.answer(502, b"<html>bad gateway</html>", Content_Type="text/html")
    with pytest.raises(ApiError) as info:
        client_for(server.url).request("GET", "/x")
    assert (info.value.reason, info.value.message) == ("", "<html>bad gateway</html>")


def test_exchange_answers_every_status_raw(server: Server) -> None:
    server.answer(409, {"reason": "AlreadyExists"})
    server.answer(503, b"busy")
    client = client_for(server.url)
    assert client.exchange("POST", "/x", body={}) == (409, b'{"reason": "AlreadyExists"}')
    assert client.exchange("GET", "/x") == (503, b"busy")


def test_get_or_none_answers_none_for_404_only(server: Server) -> None:
    client = client_for(server.url)
    server.answer(404, {"reason": "NotFound"})
    assert get_or_none(client, "/x") is None
    server.answer(500, {})
    with pytest.raises(ApiError):
        get_or_none(client, "/x")


def test_a_read_told_to_retry_after_is_retried_and_a_write_is_not(server: Server) -> None:
    server.answer(429, {"reason": "TooManyRequests"}, Retry_After="0")
    assert client_for(server.url).request("GET", "/x") == {}
    assert [s.method for s in server.seen] == ["GET", "GET"]
    server.answer(429, {"reason": "TooManyRequests"}, Retry_After="0")
    with pytest.raises(ApiError) as info:
        client_for(server.url).request("POST", "/x", body={})
    assert info.value.status == 429 and len(server.seen) == 3


def test_a_read_still_refused_after_its_retries_is_an_answer_not_a_lost_server(
    server: Server,
) -> None:
    server.always(429, {}, Retry_After="0")
    status, _ = client_for(server.url).exchange("GET", "/x")
    assert status == 429
    assert len(server.seen) == 11  # client-go's ceiling: ten retries


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_an_unreachable_server_raises_a_transport_error() -> None:
    client = client_for(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(TRANSPORT_ERRORS) as info:
        client.exchange("GET", "/x")
    assert isinstance(info.value, Unreachable) and "GET /x" in str(info.value)


def test_a_server_whose_certificate_is_not_trusted_is_a_transport_error(
    tls_server: Server,
) -> None:
    client = client_for(tls_server.url)  # no CA: the system's trust store
    with pytest.raises(TRANSPORT_ERRORS, match="CERTIFICATE_VERIFY_FAILED"):
        client.request("GET", "/x")
    assert tls_server.seen == []


# --- identities ---------------------------------------------------------------------


def test_with_token_keeps_the_server_and_trust_and_changes_only_the_identity(
    server: Server,
) -> None:
    original = client_for(server.url, token="one")
    other = original.with_token("two")
    original.request("GET", "/a")
    other.request("GET", "/b")
    assert [s.headers["authorization"] for s in server.seen] == ["Bearer one", "Bearer two"]
    assert other.credentials().server == original.credentials().server == server.url
    assert (other.credentials().scheme, other.credentials().token) == ("Bearer", "two")
