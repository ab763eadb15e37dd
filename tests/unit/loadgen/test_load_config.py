"""The bounds of a run: defaults that finish, caps no flag can lift, errors that name the flag."""

from __future__ import annotations

import math
from typing import Any

import pytest

from specdeploy.cli import main
from specdeploy.cli.loadgen import config as cfg
from specdeploy.cli.loadgen.config import LoadConfig, UsageError
from tests.unit.loadgen.fake_openai import FakeOpenAI

URL = "http://127.0.0.1:8000"


def _config(**overrides: Any) -> LoadConfig:
    fields: dict[str, Any] = {"url": URL, "model": "m", "concurrency": 4, "duration_s": 10.0}
    return LoadConfig(**{**fields, **overrides})


def test_the_defaults_bound_count_tokens_and_time() -> None:
    c = _config()
    assert 1 <= c.max_requests <= cfg.MAX_REQUESTS_CAP
    assert 1 <= c.max_tokens <= cfg.MAX_TOKENS_CAP
    assert 0 < c.timeout_s <= cfg.MAX_TIMEOUT_S
    assert (c.workload, c.api) == ("chat", "chat")


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        pytest.param({"concurrency": 0}, "--concurrency", id="no-worker"),
        pytest.param({"concurrency": 1025}, "--concurrency", id="concurrency-over-1024"),
        pytest.param({"duration_s": 0.0}, "--duration", id="zero-duration"),
        pytest.param({"duration_s": 3600.5}, "--duration", id="duration-over-an-hour"),
        pytest.param({"duration_s": math.nan}, "--duration", id="nan-duration"),
        pytest.param({"duration_s": math.inf}, "--duration", id="infinite-duration"),
        pytest.param({"max_requests": 0}, "--max-requests", id="no-request"),
        pytest.param({"max_requests": 100_001}, "--max-requests", id="requests-over-cap"),
        pytest.param({"max_tokens": 0}, "--max-tokens", id="no-token"),
        pytest.param({"max_tokens": 32_769}, "--max-tokens", id="tokens-over-cap"),
        pytest.param({"timeout_s": 0.0}, "--timeout", id="zero-timeout"),
        pytest.param({"timeout_s": 601.0}, "--timeout", id="timeout-over-cap"),
        pytest.param({"workload": "poetry"}, "--workload", id="unknown-workload"),
        pytest.param({"api": "responses"}, "--api", id="unknown-api"),
        pytest.param({"model": " "}, "--model", id="blank-model"),
        pytest.param({"backoff_s": -0.1}, "--backoff", id="negative-backoff"),
        pytest.param({"backoff_s": 61.0}, "--backoff", id="backoff-over-a-minute"),
        pytest.param({"timeline_bucket_s": 0.0}, "--timeline-bucket", id="zero-bucket"),
        pytest.param(
            {"timeline_bucket_s": 0.01, "duration_s": 3600.0},
            "--timeline-bucket",
            id="too-many-rows",
        ),
        pytest.param({"concurrency": 0, "duration_s": 0.0}, "--ramp", id="no-shape-at-all"),
    ],
)
def test_a_value_out_of_bounds_is_refused_naming_its_flag(
    overrides: dict[str, Any], flag: str
) -> None:
    with pytest.raises(UsageError, match=flag):
        _config(**overrides)


def test_the_caps_themselves_are_allowed() -> None:
    c = _config(concurrency=1024, duration_s=3600.0, max_requests=100_000, timeout_s=600.0)
    assert c.concurrency == 1024


def test_the_cli_refuses_a_capped_value_with_exit_2_before_sending_anything(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["load", "--url", fake.url, "--model", "m", "--concurrency", "5000", "--duration", "1"]
    assert main(argv) == 2
    assert "--concurrency must be >= 1 and <= 1024 (got 5000)" in capsys.readouterr().err
    assert fake.received == []
