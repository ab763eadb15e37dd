"""Only loopback servers: anything else is refused with exit code 2, before any connection."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from specdeploy.cli import main
from specdeploy.cli.loadgen import client
from specdeploy.cli.loadgen.config import LoadConfig, UsageError
from specdeploy.cli.loadgen.loopback import require_loopback
from specdeploy.cli.loadgen.runner import LoadRunner


def _loopback_only(host: str) -> Sequence[str]:
    assert host == "localhost", f"only localhost may be resolved, not {host!r}"
    return ["127.0.0.1", "::1"]


def _must_not_resolve(host: str) -> Sequence[str]:
    raise AssertionError(f"{host!r} must not be resolved")


@pytest.mark.parametrize(
    ("url", "base"),
    [
        pytest.param("http://127.0.0.1:8000", "http://127.0.0.1:8000", id="ipv4-loopback"),
        pytest.param("http://127.8.9.10:80/", "http://127.8.9.10:80", id="anywhere-in-127/8"),
        pytest.param("http://[::1]:8000", "http://[::1]:8000", id="ipv6-loopback"),
        pytest.param("http://[::ffff:127.0.0.1]:9", "http://[::ffff:127.0.0.1]:9", id="mapped"),
        pytest.param("https://localhost:8443/v1", "https://localhost:8443", id="localhost-v1"),
        pytest.param("http://127.0.0.1:8000/proxy/v1/", "http://127.0.0.1:8000/proxy", id="path"),
    ],
)
def test_a_loopback_url_is_kept_as_the_base_url(url: str, base: str) -> None:
    assert require_loopback(url, resolve=_loopback_only) == base


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://10.0.0.1:8000", id="private-address"),
        pytest.param("http://example.com", id="a-name-is-not-resolved"),
        pytest.param("http://127.0.0.1.example.com", id="a-name-that-looks-loopback"),
        pytest.param("http://0.0.0.0:8000", id="unspecified-v4"),
        pytest.param("http://[::]:8000", id="unspecified-v6"),
        pytest.param("http://[::ffff:10.0.0.1]:8000", id="mapped-non-loopback"),
        pytest.param("http://169.254.169.254", id="link-local-metadata"),
    ],
)
def test_a_non_loopback_host_is_refused_saying_why(url: str) -> None:
    with pytest.raises(UsageError, match=r"not a loopback address.*test tool"):
        require_loopback(url, resolve=_must_not_resolve)


def test_localhost_resolving_elsewhere_is_refused() -> None:
    with pytest.raises(UsageError, match="not a loopback address"):
        require_loopback("http://localhost:8000", resolve=lambda _h: ["127.0.0.1", "10.1.2.3"])


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("ftp://127.0.0.1", "http:// or https://", id="scheme"),
        pytest.param("http://127.0.0.1:8000?x=1", "no query", id="query"),
        pytest.param("http://user:pw@127.0.0.1", "credentials", id="credentials"),
        pytest.param("http://127.0.0.1:99999", "invalid port", id="port"),
        pytest.param("http://127.0.0.1:8000/v1/chat/completions", "base URL", id="endpoint"),
        pytest.param("127.0.0.1:8000", "http:// or https://", id="no-scheme"),
    ],
)
def test_a_malformed_url_is_refused(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        require_loopback(url, resolve=_must_not_resolve)


def test_the_cli_exits_2_on_a_remote_url_and_opens_no_connection(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def explode(_concurrency: int) -> None:
        raise AssertionError("no session may be opened for a refused URL")

    monkeypatch.setattr(client, "open_session", explode)
    argv = ["load", "--url", "http://10.0.0.1:8000", "--model", "m"]
    assert main([*argv, "--concurrency", "1", "--duration", "1"]) == 2
    captured = capsys.readouterr()
    assert "refusing '10.0.0.1', not a loopback address" in captured.err
    assert captured.out == ""


def test_the_runner_refuses_a_remote_url_without_the_cli() -> None:
    config = LoadConfig(url="http://192.0.2.1", model="m", concurrency=1, duration_s=1.0)
    with pytest.raises(UsageError, match="not a loopback address"):
        LoadRunner(config)
