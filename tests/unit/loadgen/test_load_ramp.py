"""Ramps: the ``--ramp`` syntax, its bounds, and the schedule the workers follow (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specdeploy.cli import main
from specdeploy.cli.loadgen.config import MAX_DURATION_S, LoadConfig, UsageError
from specdeploy.cli.loadgen.ramp import (
    MAX_STAGES,
    RampError,
    Stage,
    concurrency_at,
    format_ramp,
    mean_concurrency,
    next_active_s,
    parse_ramp,
)
from tests.unit.loadgen.fake_openai import FakeOpenAI, Script

URL = "http://127.0.0.1:8000"
UP_AND_DOWN = (Stage(30.0, 2), Stage(60.0, 16), Stage(60.0, 2))


@pytest.mark.parametrize(
    ("text", "stages"),
    [
        pytest.param("30s@2,60s@16,60s@2", UP_AND_DOWN, id="the-issues-ramp"),
        pytest.param("30@2, 60 s @ 16 ,60s@2", UP_AND_DOWN, id="spaces-and-bare-seconds"),
        pytest.param("1.5m@4", (Stage(90.0, 4),), id="minutes"),
        pytest.param("250ms@3,0.5s@0", (Stage(0.25, 3), Stage(0.5, 0)), id="ms-and-a-pause"),
    ],
)
def test_a_ramp_parses_into_stages(text: str, stages: tuple[Stage, ...]) -> None:
    assert parse_ramp(text) == stages


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("", "DURATION@CONCURRENCY", id="empty"),
        pytest.param("30s", "stage 1 '30s'", id="no-concurrency"),
        pytest.param("30s@2,@4", "stage 2 '@4'", id="no-duration"),
        pytest.param("30s@2,", "stage 2 ''", id="trailing-comma"),
        pytest.param("30h@2", "stage 1", id="unknown-unit"),
        pytest.param("-5s@2", "stage 1", id="negative"),
        pytest.param("5s@2.5", "stage 1", id="fractional-workers"),
        pytest.param(",".join(["1s@1"] * (MAX_STAGES + 1)), "at most 100", id="too-many-stages"),
    ],
)
def test_a_bad_ramp_says_which_stage(text: str, says: str) -> None:
    with pytest.raises(RampError, match=says):
        parse_ramp(text)


def test_format_gives_back_what_parses() -> None:
    assert parse_ramp(format_ramp(UP_AND_DOWN)) == UP_AND_DOWN
    assert format_ramp(UP_AND_DOWN) == "30s@2,60s@16,60s@2"


@pytest.mark.parametrize(
    ("t", "workers"),
    [(-0.1, 0), (0.0, 2), (29.99, 2), (30.0, 16), (89.9, 16), (90.0, 2), (149.9, 2), (150.0, 0)],
)
def test_the_concurrency_asked_follows_the_stages(t: float, workers: int) -> None:
    assert concurrency_at(UP_AND_DOWN, t) == workers


@pytest.mark.parametrize(
    ("worker", "t", "at"),
    [
        pytest.param(0, 10.0, 10.0, id="active-now"),
        pytest.param(5, 10.0, 30.0, id="waits-for-the-peak"),
        pytest.param(5, 95.0, None, id="no-later-stage-wants-it"),
        pytest.param(1, 95.0, 95.0, id="kept-in-the-ramp-down"),
        pytest.param(16, 0.0, None, id="beyond-the-peak"),
        pytest.param(0, 150.0, None, id="after-the-end"),
    ],
)
def test_a_worker_knows_when_it_may_start_next(worker: int, t: float, at: float | None) -> None:
    assert next_active_s(UP_AND_DOWN, worker, t) == at


def test_the_mean_over_a_bucket_weighs_both_sides_of_a_boundary() -> None:
    assert mean_concurrency(UP_AND_DOWN, 29.5, 30.5) == pytest.approx(9.0)
    assert mean_concurrency(UP_AND_DOWN, 40.0, 41.0) == pytest.approx(16.0)
    assert mean_concurrency(UP_AND_DOWN, 149.5, 150.5) == pytest.approx(1.0)


def _ramped(ramp: tuple[Stage, ...], **overrides: Any) -> LoadConfig:
    return LoadConfig(url=URL, model="m", ramp=ramp, **overrides)


def test_a_ramp_sets_the_peak_and_the_total_duration() -> None:
    c = _ramped(UP_AND_DOWN)
    assert (c.concurrency, c.duration_s) == (16, 150.0)
    assert c.stages == UP_AND_DOWN
    plain = LoadConfig(url=URL, model="m", concurrency=3, duration_s=5.0)
    assert plain.stages == (Stage(5.0, 3),)


@pytest.mark.parametrize(
    ("ramp", "overrides", "says"),
    [
        pytest.param(UP_AND_DOWN, {"concurrency": 4}, "replaces --concurrency", id="and-flags"),
        pytest.param((Stage(0.0, 2),), {}, "stage 1 must last > 0", id="zero-length-stage"),
        pytest.param((Stage(5.0, 1), Stage(5.0, 1025)), {}, "stage 2 must ask", id="over-cap"),
        pytest.param((Stage(5.0, 0),), {}, "no stage asks for a worker", id="only-pauses"),
        pytest.param(
            (Stage(MAX_DURATION_S, 1), Stage(1.0, 1)), {}, "more than 3600", id="longer-than-1h"
        ),
    ],
)
def test_a_ramp_out_of_bounds_is_refused_naming_the_flag(
    ramp: tuple[Stage, ...], overrides: dict[str, Any], says: str
) -> None:
    with pytest.raises(UsageError, match="--ramp") as raised:
        _ramped(ramp, **overrides)
    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["--ramp", "1s@2x"], "--ramp: stage 1 '1s@2x'", id="unparsable"),
        pytest.param(
            ["--ramp", "1s@2", "--duration", "3"], "--ramp replaces", id="ramp-and-duration"
        ),
        pytest.param(["--concurrency", "3"], "or --ramp", id="neither-shape"),
    ],
)
def test_the_cli_refuses_a_bad_ramp_with_exit_2_before_sending_anything(
    fake: FakeOpenAI, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert main(["load", "--url", fake.url, "--model", "m", *args]) == 2
    assert says in capsys.readouterr().err
    assert fake.received == []


def test_the_cli_runs_a_ramp_and_writes_its_timeline(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.script(lambda _n: Script(tokens=3, first_delay_s=0.02))
    out = tmp_path / "ramp.json"
    argv = ["load", "--url", fake.url, "--model", "m", "--ramp", "0.2s@1,0.2s@3"]
    assert main([*argv, "--timeline-bucket", "0.1", "--json", str(out)]) == 0
    assert "ramp 0.2s@1,0.2s@3" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    summary, timeline = doc["summary"], doc["timeline"]
    assert (summary["ramp"], summary["concurrency"], summary["duration_s"]) == (
        "0.2s@1,0.2s@3",
        3,
        pytest.approx(0.4),
    )
    assert fake.max_in_flight == summary["max_in_flight"] == 3
    assert timeline["bucket_s"] == 0.1 and timeline["started_at_unix"] > 1.7e9
    assert [r["concurrency"] for r in timeline["rows"][:4]] == [1.0, 1.0, 3.0, 3.0]
    assert sum(r["started"] for r in timeline["rows"]) == summary["requests"]["sent"]
