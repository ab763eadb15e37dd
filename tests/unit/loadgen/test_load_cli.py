"""``specdeploy load`` end to end against the fake server: summary, JSON, exit codes, Ctrl-C."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specdeploy.cli import main
from tests.unit.loadgen.fake_openai import FakeOpenAI, Script

SUMMARY_KEYS = {
    "workload", "prompts", "api", "model", "url", "concurrency", "duration_s", "max_requests",
    "max_tokens", "ignore_eos", "timeout_s", "seed", "ramp", "backoff_s", "started_at_unix",
    "elapsed_s", "stopped_by", "max_in_flight",
    "requests", "output_tokens", "output_tokens_per_s", "requests_per_s",
    "ttft_ms", "tpot_ms", "latency_ms",
}  # fmt: skip
ROW_KEYS = {
    "index", "worker", "start_s", "ok", "outcome", "reason", "status", "output_tokens",
    "tokens_from", "ttft_ms", "tpot_ms", "latency_ms", "detail",
}  # fmt: skip


def _load(fake: FakeOpenAI, *args: str, requests: int = 6) -> list[str]:
    return [
        "load", "--url", fake.url, "--model", "fake", "--concurrency", "2", "--duration", "20",
        "--max-requests", str(requests), "--timeout", "0.5", *args,
    ]  # fmt: skip


def test_the_json_has_the_summary_and_one_row_per_request(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.script(lambda _n: Script(tokens=5, token_delay_s=0.01))
    out = tmp_path / "load.json"
    assert main([*_load(fake, "--workload", "code", "--json", str(out))]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    assert (doc["kind"], doc["version"]) == ("specdeploy-load", 2)
    summary = doc["summary"]
    assert set(summary) == SUMMARY_KEYS
    assert summary["requests"] == {
        "sent": 6, "ok": 6, "refused": 0, "failed": 0, "timed_out": 0, "cancelled": 0,
        "by_reason": {},
    }  # fmt: skip
    assert summary["output_tokens"] == 30 and summary["output_tokens_per_s"] > 0
    assert (summary["workload"], summary["concurrency"], summary["stopped_by"]) == (
        "code",
        2,
        "max-requests",
    )
    for key in ("ttft_ms", "tpot_ms", "latency_ms"):
        assert set(summary[key]) == {"p50", "p90", "p99", "mean", "count"}
        assert summary[key]["count"] == 6
    assert [r["index"] for r in doc["rows"]] == list(range(6))
    assert all(set(r) == ROW_KEYS and r["ok"] for r in doc["rows"])
    assert set(doc["timeline"]) == {"bucket_s", "started_at_unix", "rows"}
    assert sum(r["started"] for r in doc["timeline"]["rows"]) == 6
    assert sum(r["output_tokens_per_s"] for r in doc["timeline"]["rows"]) == pytest.approx(30)
    text = capsys.readouterr().out
    assert "requests: 6 ok, 0 refused, 0 failed, 0 timed out" in text
    assert "TTFT" in text and "TPOT" in text


def test_some_failures_exit_1_and_still_print_the_summary(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.script(lambda n: Script(fail="500" if n == 2 else None))
    assert main(_load(fake)) == 1
    assert "requests: 5 ok, 0 refused, 1 failed (http_500 1), 0 timed out" in (
        capsys.readouterr().out
    )


def test_no_success_at_all_exits_1(fake: FakeOpenAI) -> None:
    fake.script(lambda _n: Script(fail="cut"))
    assert main(_load(fake, requests=3)) == 1


def test_a_missing_aiohttp_is_named_with_the_extra_that_brings_it(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "aiohttp" else real(name, *a)
    )
    assert main(_load(fake)) == 2
    assert "specdeploy[operator]" in capsys.readouterr().err
    assert fake.received == []


def test_ctrl_c_stops_cleanly_and_prints_what_was_measured(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.script(lambda n: Script(tokens=3) if n < 4 else Script(fail="hang", hang_s=10.0))

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 10
        while len(fake.received) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)  # both hanging requests have arrived: the run is under way
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    argv = ["load", "--url", fake.url, "--model", "fake", "--concurrency", "2"]
    assert main([*argv, "--duration", "20", "--timeout", "20"]) == 130
    text = capsys.readouterr().out
    assert "stopped by interrupt" in text
    assert "requests: 4 ok, 0 refused, 0 failed, 0 timed out, 2 cancelled" in text


def test_the_help_says_it_is_loopback_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["load", "--help"])
    assert exit_info.value.code == 0
    assert "loopback" in capsys.readouterr().out
