"""The closed loop: N workers, each sending its next request when the last one ends.

A run stops starting requests when ``duration_s`` has passed, when
``max_requests`` were sent, or on ``interrupt()`` (Ctrl-C in the CLI). The
first two let the requests in flight finish, each bounded by its own
``timeout_s``, so a run lasts at most ``duration_s + timeout_s``; an
interrupt cancels them (they are counted as cancelled, neither ok nor
failed). The loop runs on one event loop thread, so its counters need no
lock.

A ramp (``config.stages``) keeps the peak's workers; worker ``w`` sleeps
through the stages that ask for ``w`` workers or fewer and starts again when
a stage asks for more (``ramp.next_active_s``). A worker whose request was
refused (``results.outcome``) waits ``backoff_s`` before its next one: a
closed loop against a port nobody listens on would otherwise spin through
``max_requests`` in a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from specdeploy.cli.loadgen.config import LoadConfig
from specdeploy.cli.loadgen.loopback import require_loopback
from specdeploy.cli.loadgen.prompts import PromptStream, prompt_stream
from specdeploy.cli.loadgen.ramp import concurrency_at, next_active_s
from specdeploy.cli.loadgen.request import RequestSpec, build_request
from specdeploy.cli.loadgen.results import Measured, RequestResult

Clock = Callable[[], float]
Send = Callable[[RequestSpec], Awaitable[Measured]]
Progress = Callable[[str], None]

PROGRESS_INTERVAL_S = 5.0


@dataclass
class LoadRun:
    """Everything one run measured, in the order requests finished."""

    config: LoadConfig
    prompt_source: str
    results: list[RequestResult] = field(default_factory=list)
    sent: int = 0
    elapsed_s: float = 0.0
    stopped_by: str = "duration"
    """``duration``, ``max-requests`` or ``interrupt``."""
    max_in_flight: int = 0
    started_s: list[float] = field(default_factory=list)
    """When each request was sent (seconds since the start), cancelled ones included."""
    clock_start: float = 0.0
    """The run's clock at the start: ``Measured`` times are on that clock."""
    started_at_unix: float = 0.0
    """The wall clock at the start, to join the timeline with Prometheus' samples."""

    @property
    def cancelled(self) -> int:
        """Requests sent but never finished (an interrupt cancelled them)."""
        return self.sent - len(self.results)


class LoadRunner:
    """Runs one ``LoadConfig`` against its loopback server."""

    def __init__(
        self,
        config: LoadConfig,
        *,
        prompts: PromptStream | None = None,
        clock: Clock = time.perf_counter,
        wall_clock: Clock = time.time,
        progress: Progress | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        require_loopback(config.url)  # also for callers that skip the CLI
        self.config = config
        self._prompts = prompts or prompt_stream(config.workload, config.seed)
        self._clock = clock
        self._wall_clock = wall_clock
        self._progress = progress
        self._progress_interval_s = progress_interval_s
        self.run_state = LoadRun(config, self._prompts.source)
        self._t0 = 0.0
        self._in_flight = 0
        self._interrupted = False
        self._workers: list[asyncio.Task[None]] = []

    def interrupt(self) -> None:
        """Stop now: start nothing more and cancel what is in flight (idempotent)."""
        self._interrupted = True
        for task in self._workers:
            task.cancel()

    async def run(self) -> LoadRun:
        """Drive the load until a bound is reached, and return what was measured."""
        from specdeploy.cli.loadgen import client  # aiohttp: only when a run happens

        async with client.open_session(self.config.concurrency) as session:

            async def send(spec: RequestSpec) -> Measured:
                return await client.stream_request(
                    session, spec, timeout_s=self.config.timeout_s, clock=self._clock
                )

            return await self.run_with(send)

    async def run_with(self, send: Send) -> LoadRun:
        """The loop itself, over any ``send`` (the run's HTTP client, or a test's)."""
        state = self.run_state
        self._t0 = state.clock_start = self._clock()
        state.started_at_unix = self._wall_clock()
        self._workers = [
            asyncio.create_task(self._worker(w, send)) for w in range(self.config.concurrency)
        ]
        reporter = asyncio.create_task(self._report_progress()) if self._progress else None
        await asyncio.gather(*self._workers, return_exceptions=True)
        if reporter is not None:
            reporter.cancel()
        state.elapsed_s = self._clock() - self._t0
        state.stopped_by = self._stopped_by()
        return state

    def _may_start(self) -> bool:
        return (
            not self._interrupted
            and self.run_state.sent < self.config.max_requests
            and self._clock() - self._t0 < self.config.duration_s
        )

    async def _until_active(self, worker: int) -> bool:
        """Sleep until the ramp asks for ``worker``; False when no later stage does."""
        stages = self.config.stages
        while True:
            now = self._clock() - self._t0
            if concurrency_at(stages, now) > worker:
                return True
            at = next_active_s(stages, worker, now)
            if at is None:
                return False
            # the loop may wake a hair early: the check above runs again
            await asyncio.sleep(max(at - now, 0.001))

    def _stopped_by(self) -> str:
        if self._interrupted:
            return "interrupt"
        if self.run_state.sent >= self.config.max_requests:
            return "max-requests"
        return "duration"

    async def _worker(self, worker: int, send: Send) -> None:
        state = self.run_state
        while self._may_start() and await self._until_active(worker) and self._may_start():
            index = state.sent
            state.sent += 1
            spec = build_request(self.config, self._prompts.next())
            start_s = self._clock() - self._t0
            state.started_s.append(start_s)
            self._in_flight += 1
            state.max_in_flight = max(state.max_in_flight, self._in_flight)
            try:
                measured = await send(spec)
            finally:
                self._in_flight -= 1
            state.results.append(RequestResult(index, worker, start_s, measured))
            if measured.outcome == "refused" and self.config.backoff_s > 0:
                await asyncio.sleep(self.config.backoff_s)

    async def _report_progress(self) -> None:
        assert self._progress is not None
        done_before, tokens_before, at_before = 0, 0, self._clock()
        while True:
            await asyncio.sleep(self._progress_interval_s)
            results = self.run_state.results
            now = self._clock()
            tokens = sum(r.measured.output_tokens for r in results if r.measured.ok)
            refused = sum(r.measured.outcome == "refused" for r in results)
            failed = sum(r.measured.outcome in ("failed", "timed_out") for r in results)
            rate = (tokens - tokens_before) / max(now - at_before, 1e-9)
            asked = concurrency_at(self.config.stages, now - self._t0)
            self._progress(
                f"load: {now - self._t0:6.1f} s  {len(results)} done ({refused} refused, "
                f"{failed} failed), {self._in_flight} in flight of {asked} asked, "
                f"{rate:.0f} output tok/s (+{len(results) - done_before} requests)"
            )
            done_before, tokens_before, at_before = len(results), tokens, now
