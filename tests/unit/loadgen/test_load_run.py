"""The closed loop against the fake server: real concurrency, bounds, failures, timings."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.time_scale import scaled
from specdeploy.cli.loadgen.config import LoadConfig
from specdeploy.cli.loadgen.request import WORKLOAD_HEADER
from specdeploy.cli.loadgen.runner import LoadRun, LoadRunner
from tests.unit.loadgen.fake_openai import FakeOpenAI, Script


def _config(fake: FakeOpenAI, **overrides: Any) -> LoadConfig:
    fields: dict[str, Any] = {
        "url": fake.url,
        "model": "fake",
        "concurrency": 2,
        "duration_s": 30.0,
        "max_requests": 4,
        "timeout_s": 5.0,
    }
    return LoadConfig(**{**fields, **overrides})


def _run(fake: FakeOpenAI, **overrides: Any) -> LoadRun:
    return asyncio.run(LoadRunner(_config(fake, **overrides)).run())


def _reasons(run: LoadRun) -> dict[int, str | None]:
    return {r.index: r.measured.reason for r in run.results}


@pytest.mark.parametrize(
    ("concurrency", "rounds", "hold_s"),
    [
        pytest.param(1, 4, 0.08, id="one-worker-is-sequential"),
        pytest.param(5, 4, 0.08, id="five-workers"),
        pytest.param(128, 1, 0.4, id="beyond-aiohttps-default-pool-of-100"),
    ],
)
def test_the_server_sees_exactly_n_requests_at_once(
    fake: FakeOpenAI, concurrency: int, rounds: int, hold_s: float
) -> None:
    fake.script(lambda _n: Script(tokens=2, first_delay_s=hold_s))
    run = _run(fake, concurrency=concurrency, max_requests=rounds * concurrency)
    assert fake.max_in_flight == concurrency
    assert run.max_in_flight == concurrency
    assert len(fake.received) == run.sent == rounds * concurrency
    assert all(r.measured.ok for r in run.results)


def test_max_requests_bounds_what_is_sent(fake: FakeOpenAI) -> None:
    run = _run(fake, concurrency=3, max_requests=7)
    assert len(fake.received) == 7 and run.sent == 7 and len(run.results) == 7
    assert run.stopped_by == "max-requests"
    assert sorted(r.index for r in run.results) == list(range(7))


def test_duration_bounds_when_requests_start(fake: FakeOpenAI) -> None:
    fake.script(lambda _n: Script(tokens=2, first_delay_s=0.05))
    run = _run(fake, concurrency=2, duration_s=0.4, max_requests=1000)
    assert run.stopped_by == "duration"
    assert len(fake.received) == run.sent >= 4
    assert max(r.start_s for r in run.results) < 0.4
    # the last requests finish (about 0.05 s each)
    assert 0.4 <= run.elapsed_s < 0.4 + scaled(0.5)


def test_requests_in_flight_at_the_deadline_are_bounded_by_the_timeout(fake: FakeOpenAI) -> None:
    fake.script(lambda _n: Script(fail="hang", hang_s=5.0))
    run = _run(fake, concurrency=2, duration_s=0.1, max_requests=100, timeout_s=0.3)
    assert run.sent == 2 and _reasons(run) == {0: "timeout", 1: "timeout"}
    assert run.elapsed_s < 0.1 + 0.3 + scaled(0.5)


def test_failures_are_counted_by_kind(fake: FakeOpenAI) -> None:
    failures = {1: "500", 3: "hang", 4: "cut", 6: "error"}
    fake.script(lambda n: Script(tokens=6, fail=failures.get(n), hang_s=3.0))
    run = _run(fake, concurrency=1, max_requests=8, timeout_s=0.3)
    assert _reasons(run) == {
        0: None,
        1: "http_500",
        2: None,
        3: "timeout",
        4: "broken_stream",
        5: None,
        6: "stream_error",
        7: None,
    }
    by_index = {r.index: r.measured for r in run.results}
    assert by_index[1].status == 500 and "boom" in (by_index[1].detail or "")
    assert by_index[4].output_tokens == 3  # what arrived before the cut


def test_ttft_and_tpot_match_the_servers_delays(fake: FakeOpenAI) -> None:
    fake.script(lambda _n: Script(tokens=6, first_delay_s=0.15, token_delay_s=0.04))
    run = _run(fake, concurrency=1, max_requests=2)
    for result in run.results:
        m = result.measured
        assert m.ok and m.output_tokens == 6 and m.tokens_from == "usage"
        assert m.ttft_s is not None and 0.147 <= m.ttft_s < 0.15 + scaled(0.1)
        assert m.tpot_s is not None and 0.039 <= m.tpot_s < 0.04 + scaled(0.02)
        assert m.latency_s >= 0.15 + 5 * 0.04


@pytest.mark.parametrize(
    ("usage", "tokens", "source", "tpot"),
    [
        pytest.param(True, 6, "usage", 0.10 / 5, id="usage-counts-every-token"),
        pytest.param(False, 3, "chunks", 0.10 / 2, id="without-usage-a-chunk-is-a-token"),
    ],
)
def test_several_tokens_per_chunk_are_counted_from_usage(
    fake: FakeOpenAI, usage: bool, tokens: int, source: str, tpot: float
) -> None:
    fake.script(lambda _n: Script(tokens=6, tokens_per_chunk=2, token_delay_s=0.05, usage=usage))
    (result,) = _run(fake, concurrency=1, max_requests=1).results
    assert (result.measured.output_tokens, result.measured.tokens_from) == (tokens, source)
    assert result.measured.tpot_s == pytest.approx(tpot, abs=0.015)


@pytest.mark.parametrize(
    ("api", "path", "field"),
    [("chat", "/v1/chat/completions", "messages"), ("completions", "/v1/completions", "prompt")],
)
def test_every_request_streams_with_usage_and_names_its_workload(
    fake: FakeOpenAI, api: str, path: str, field: str
) -> None:
    _run(fake, api=api, workload="code", max_requests=3, max_tokens=32, ignore_eos=True)
    assert len(fake.received) == 3
    for request in fake.received:
        assert request.path == path
        assert request.headers[WORKLOAD_HEADER] == "code"
        body = request.body
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert (body["model"], body["max_tokens"], body["ignore_eos"]) == ("fake", 32, True)
        assert field in body


def _bodies(fake: FakeOpenAI, seed: int) -> list[Any]:
    fake.received.clear()
    _run(fake, concurrency=1, max_requests=5, seed=seed, workload="random")
    return [r.body["messages"] for r in fake.received]


def test_a_seed_makes_the_run_reproducible(fake: FakeOpenAI) -> None:
    first = _bodies(fake, 7)
    assert _bodies(fake, 7) == first
    assert _bodies(fake, 8) != first


def test_an_interrupt_stops_at_once_and_keeps_what_was_measured(fake: FakeOpenAI) -> None:
    fake.script(lambda n: Script(tokens=2) if n < 3 else Script(fail="hang", hang_s=5.0))
    runner = LoadRunner(_config(fake, concurrency=2, max_requests=100, timeout_s=10.0))

    async def main() -> LoadRun:
        asyncio.get_running_loop().call_later(0.3, runner.interrupt)
        return await runner.run()

    run = asyncio.run(main())
    assert run.stopped_by == "interrupt"
    assert [r.measured.ok for r in sorted(run.results, key=lambda r: r.index)] == [True] * 3
    assert run.cancelled == 2 and run.elapsed_s < 1.5


def test_progress_lines_come_while_it_runs(fake: FakeOpenAI) -> None:
    fake.script(lambda _n: Script(tokens=2, first_delay_s=0.02))
    lines: list[str] = []
    config = _config(fake, duration_s=0.45, max_requests=1000)
    runner = LoadRunner(config, progress=lines.append, progress_interval_s=0.1)
    asyncio.run(runner.run())
    assert len(lines) >= 3
    assert all("done" in line and "tok/s" in line for line in lines)
