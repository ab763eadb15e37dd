"""The closed loop under a ramp, over a fake ``send`` (no network): who starts when.

``run_with`` takes any coroutine as the HTTP client, so these tests give it
one that holds a request for a fixed time and counts what is in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from specdeploy.cli.loadgen.config import LoadConfig
from specdeploy.cli.loadgen.ramp import Stage, concurrency_at
from specdeploy.cli.loadgen.request import RequestSpec
from specdeploy.cli.loadgen.results import Measured
from specdeploy.cli.loadgen.runner import LoadRun, LoadRunner

URL = "http://127.0.0.1:8000"
HOLD_S = 0.02
RAMP = (Stage(0.15, 1), Stage(0.15, 4), Stage(0.15, 0), Stage(0.15, 2))
"""Up to 4, a pause, and 2 again: every switch a pool's autoscaler meets."""


class FakeSend:
    """Holds each request ``HOLD_S`` and answers as ``answer(n)`` says; counts what is in flight."""

    def __init__(self, answer: Callable[[int], str | None] = lambda _n: None) -> None:
        self.answer = answer
        self.in_flight = 0
        self.peak = 0
        self.calls = 0

    async def __call__(self, spec: RequestSpec) -> Measured:
        number, self.calls = self.calls, self.calls + 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        sent = time.perf_counter()
        try:
            await asyncio.sleep(HOLD_S)
        finally:
            self.in_flight -= 1
        ended = time.perf_counter()
        reason = self.answer(number)
        tokens = 4 if reason is None else 0
        return Measured(
            sent_at=sent,
            ended_at=ended,
            reason=reason,
            status=200 if reason is None else 503,
            output_tokens=tokens,
            tokens_from="usage" if tokens else None,
            first_token_at=sent + HOLD_S / 4 if tokens else None,
            last_token_at=ended if tokens else None,
        )


def _run(send: FakeSend, **overrides: Any) -> LoadRun:
    fields: dict[str, Any] = {"url": URL, "model": "m", "ramp": RAMP, "timeout_s": 1.0}
    runner = LoadRunner(LoadConfig(**{**fields, **overrides}))
    return asyncio.run(runner.run_with(send))


def _workers_started_in(run: LoadRun, start: float, end: float) -> set[int]:
    return {r.worker for r in run.results if start <= r.start_s < end}


def test_each_stage_starts_only_the_workers_it_asks_for() -> None:
    send = FakeSend()
    run = _run(send)
    assert run.stopped_by == "duration" and send.peak == run.max_in_flight == 4
    assert run.config.concurrency == 4 and run.config.duration_s == pytest.approx(0.6)
    for result in run.results:
        # a request's start is read just after its worker was let in (a boundary may pass)
        asked = max(
            concurrency_at(RAMP, result.start_s), concurrency_at(RAMP, result.start_s - 5e-3)
        )
        assert result.worker < asked, result
    assert _workers_started_in(run, 0.0, 0.145) == {0}
    assert _workers_started_in(run, 0.155, 0.295) == {0, 1, 2, 3}
    assert _workers_started_in(run, 0.305, 0.445) == set()  # the pause: in-flight ones end
    assert _workers_started_in(run, 0.455, 0.6) == {0, 1}
    assert max(r.start_s for r in run.results) < 0.6
    assert run.elapsed_s < 0.6 + HOLD_S + 0.2
    assert len(run.started_s) == run.sent == len(run.results) == send.calls


def test_a_refused_worker_backs_off_instead_of_spinning() -> None:
    single = (Stage(0.3, 1),)
    spinning = _run(FakeSend(lambda _n: "http_503"), ramp=single, backoff_s=0.0)
    backing_off = _run(FakeSend(lambda _n: "http_503"), ramp=single, backoff_s=0.1)
    # without a pause one worker sends back to back (one per HOLD_S); with it, one per 0.12 s
    assert spinning.sent >= 8
    assert 2 <= backing_off.sent <= 3
    assert all(r.measured.outcome == "refused" for r in backing_off.results)


def test_only_refusals_back_off() -> None:
    run = _run(FakeSend(lambda _n: "http_500"), ramp=(Stage(0.3, 1),), backoff_s=0.1)
    assert run.sent >= 8  # a failure is not a reason to wait: it is counted and the loop goes on
