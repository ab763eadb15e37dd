"""The timeline: per bucket, the load asked for and what came back (pure, literal runs)."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.cli.loadgen.config import LoadConfig
from specdeploy.cli.loadgen.ramp import Stage
from specdeploy.cli.loadgen.report import document
from specdeploy.cli.loadgen.results import Measured, RequestResult
from specdeploy.cli.loadgen.runner import LoadRun
from specdeploy.cli.loadgen.timeline import bucket_count, timeline

T0 = 1000.0
"""The run's clock at its start: ``Measured`` times are absolute on that clock."""


def _ok(index: int, sent: float, first: float, last: float, tokens: int) -> RequestResult:
    m = Measured(
        sent_at=T0 + sent,
        ended_at=T0 + last,
        reason=None,
        status=200,
        output_tokens=tokens,
        tokens_from="usage",
        first_token_at=T0 + first,
        last_token_at=T0 + last,
    )
    return RequestResult(index, 0, sent, m)


def _not_ok(index: int, sent: float, ended: float, reason: str) -> RequestResult:
    return RequestResult(
        index, 0, sent, Measured(sent_at=T0 + sent, ended_at=T0 + ended, reason=reason)
    )


def _run(results: list[RequestResult], elapsed: float, **config: Any) -> LoadRun:
    c = LoadConfig(url="http://127.0.0.1:8000", model="m", **config)
    run = LoadRun(c, "built-in", results=results, sent=len(results), elapsed_s=elapsed)
    run.started_s = sorted(r.start_s for r in results)
    run.clock_start, run.started_at_unix = T0, 1_700_000_000.25
    return run


RAMP = (Stage(2.0, 1), Stage(1.0, 4))


def test_rows_count_starts_and_ends_by_outcome_in_their_buckets() -> None:
    run = _run(
        [
            _ok(0, 0.1, 0.2, 0.9, 8),
            _not_ok(1, 1.0, 1.01, "http_503"),
            _not_ok(2, 1.2, 2.1, "http_500"),
            _not_ok(3, 2.5, 3.5, "timeout"),
            _ok(4, 2.6, 2.7, 2.7, 1),
        ],
        elapsed=3.5,
        ramp=RAMP,
    )
    doc = timeline(run)
    assert (doc["bucket_s"], doc["started_at_unix"]) == (1.0, 1_700_000_000.25)
    rows = doc["rows"]
    assert [r["t_s"] for r in rows] == [0.0, 1.0, 2.0, 3.0]
    assert [r["concurrency"] for r in rows] == [1.0, 1.0, 4.0, 0.0]
    assert [r["started"] for r in rows] == [1, 2, 2, 0]
    assert [(r["ok"], r["refused"], r["failed"], r["timed_out"]) for r in rows] == [
        (1, 0, 0, 0),
        (0, 1, 0, 0),
        (1, 0, 1, 0),
        (0, 0, 0, 1),  # the last row takes what ended after the nominal end (the drain)
    ]


def test_tokens_are_spread_from_the_first_to_the_last_and_add_up() -> None:
    # 12 tokens from 0.5 s to 2.5 s: a quarter, a half, a quarter of them per bucket
    run = _run([_ok(0, 0.0, 0.5, 2.5, 12)], elapsed=2.5, concurrency=1, duration_s=2.0)
    rows = timeline(run)["rows"]
    assert [r["output_tokens_per_s"] for r in rows] == pytest.approx([3.0, 6.0, 3.0])
    assert sum(r["output_tokens_per_s"] for r in rows) == pytest.approx(12)


def test_tpot_is_the_mean_of_the_requests_that_ended_in_the_bucket() -> None:
    run = _run(
        [_ok(0, 0.0, 0.1, 0.5, 5), _ok(1, 0.0, 0.1, 0.9, 5), _not_ok(2, 1.0, 1.5, "http_500")],
        elapsed=2.0,
        concurrency=2,
        duration_s=2.0,
    )
    rows = timeline(run)["rows"]
    assert rows[0]["tpot_ms_mean"] == pytest.approx((100.0 + 200.0) / 2)
    assert rows[1]["tpot_ms_mean"] is None and rows[1]["output_tokens_per_s"] == 0


def test_a_narrower_bucket_gives_more_rows_with_rates_per_second() -> None:
    run = _run([_ok(0, 0.0, 0.0, 1.0, 11)], elapsed=1.0, concurrency=1, duration_s=1.0,
               timeline_bucket_s=0.25)  # fmt: skip
    rows = timeline(run)["rows"]
    assert len(rows) == 4 and [r["t_s"] for r in rows] == [0.0, 0.25, 0.5, 0.75]
    assert [r["output_tokens_per_s"] for r in rows] == pytest.approx([11.0] * 4)


@pytest.mark.parametrize(
    ("elapsed", "bucket", "count"),
    [(0.0, 1.0, 1), (1.0, 1.0, 1), (1.0001, 1.0, 2), (150.4, 1.0, 151), (0.3, 0.1, 3)],
)
def test_the_rows_cover_the_whole_run(elapsed: float, bucket: float, count: int) -> None:
    assert bucket_count(elapsed, bucket) == count


def test_the_document_carries_the_timeline_beside_the_summary() -> None:
    run = _run([_ok(0, 0.0, 0.5, 1.5, 4)], elapsed=2.0, ramp=RAMP)
    doc = document(run)
    assert set(doc) == {"kind", "version", "summary", "timeline", "rows"}
    assert doc["summary"]["ramp"] == "2s@1,1s@4" and doc["summary"]["concurrency"] == 4
    assert len(doc["timeline"]["rows"]) == 2
