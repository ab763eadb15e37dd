"""Outcome classes: ok, refused (retriable), failed, timed out; what each does to the exit code.

Against the fake server over real loopback HTTP, since the refusals are
things a socket does (a closed port, a reset): a fake ``send`` would only
restate the classification.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from specdeploy.cli import main
from specdeploy.cli.loadgen.client import connect_reason
from specdeploy.cli.loadgen.config import LoadConfig
from specdeploy.cli.loadgen.results import OUTCOMES, outcome
from specdeploy.cli.loadgen.runner import LoadRun, LoadRunner
from tests.unit.loadgen.fake_openai import FakeOpenAI, Script


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        (None, "ok"),
        ("http_429", "refused"),
        ("http_503", "refused"),
        ("refused", "refused"),
        ("reset", "refused"),
        ("disconnected", "refused"),
        ("timeout", "timed_out"),
        ("http_500", "failed"),
        ("http_404", "failed"),
        ("connect", "failed"),
        ("broken_stream", "failed"),
        ("stream_error", "failed"),
        ("no_tokens", "failed"),
        ("client_error", "failed"),
    ],
)
def test_each_kind_falls_in_one_outcome_class(reason: str | None, cls: str) -> None:
    assert outcome(reason) == cls and cls in OUTCOMES


def _run(url: str, **overrides: Any) -> LoadRun:
    fields: dict[str, Any] = {
        "url": url,
        "model": "fake",
        "concurrency": 1,
        "duration_s": 30.0,
        "max_requests": 7,
        "timeout_s": 0.3,
        "backoff_s": 0.0,
    }
    return asyncio.run(LoadRunner(LoadConfig(**{**fields, **overrides})).run())


def test_the_server_turning_requests_away_is_refused_not_failed(fake: FakeOpenAI) -> None:
    plan = {1: "429", 2: "503", 3: "reset", 5: "500", 6: "hang"}
    fake.script(lambda n: Script(tokens=3, fail=plan.get(n), hang_s=3.0))
    run = _run(fake.url)
    by_index = {r.index: (r.measured.outcome, r.measured.reason) for r in run.results}
    assert by_index[0] == by_index[4] == ("ok", None)
    assert by_index[1] == ("refused", "http_429") and by_index[2] == ("refused", "http_503")
    assert by_index[3][0] == "refused" and by_index[3][1] in ("reset", "disconnected")
    assert by_index[5] == ("failed", "http_500") and by_index[6] == ("timed_out", "timeout")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # bound once, closed: nothing listens on it now


def test_a_port_nobody_listens_on_is_refused() -> None:
    run = _run(f"http://127.0.0.1:{_closed_port()}", max_requests=3)
    assert [r.measured.reason for r in run.results] == ["refused"] * 3


def _load(url: str, out: Path, requests: int) -> list[str]:
    return [
        "load", "--url", url, "--model", "fake", "--concurrency", "1", "--duration", "20",
        "--max-requests", str(requests), "--timeout", "0.3", "--backoff", "0", "--json", str(out),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("plan", "code", "line"),
    [
        pytest.param(
            {1: "503", 2: "429"},
            0,
            "4 ok, 2 refused (http_429 1, http_503 1), 0 failed",
            id="refusals-exit-0",
        ),
        pytest.param({1: "hang"}, 1, "5 ok, 0 refused, 0 failed, 1 timed out", id="timeout-exit-1"),
        pytest.param({1: "cut"}, 1, "0 refused, 1 failed (broken_stream 1)", id="failure-exit-1"),
    ],
)
def test_the_exit_code_reports_failures_and_timeouts_not_refusals(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    plan: dict[int, str],
    code: int,
    line: str,
) -> None:
    fake.script(lambda n: Script(tokens=4, fail=plan.get(n), hang_s=3.0))
    out = tmp_path / "load.json"
    assert main(_load(fake.url, out, 6)) == code
    assert line in capsys.readouterr().out
    doc = json.loads(out.read_text())
    counts = doc["summary"]["requests"]
    assert sum(counts[c] for c in OUTCOMES) == counts["sent"] == 6
    assert [r["outcome"] for r in doc["rows"]].count("ok") == counts["ok"]


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ECONNREFUSED, "refused"),  # nothing listens
        (errno.ECONNRESET, "reset"),  # the listener closed with the connection queued
        (errno.EHOSTUNREACH, "connect"),
        (None, "connect"),
    ],
)
def test_a_connect_that_the_server_refused_or_reset_is_retriable_and_others_fail(
    code: int | None, reason: str
) -> None:
    error = OSError(code, "Connect call failed") if code is not None else OSError("no errno")
    assert connect_reason(error) == reason
    assert outcome(reason) == ("failed" if reason == "connect" else "refused")
