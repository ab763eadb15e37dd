"""A per-step trace from inside vLLM's engine, for the CPU benchmark (``bench/cpu_dsd.py``).

End-to-end figures (tokens per second of wall time, TPOT) mix prefill,
queueing and the client into the decode speed that the K choice is about.
The benchmark therefore also reads each engine step as the engine ran it:
the scheduler vLLM builds (its own, or the add-on's when
``SPECDEPLOY_TABLE_FILE`` is set, the same choice of sync or async class as
``scheduler_factory``) is subclassed with a mixin that stamps when
``schedule()`` began and ``update_from_output()`` ended, reads the step
with the add-on's own reader (``vllm_addon.steps.read_step``: K, the
verified width, drafts and accepted tokens of the decoding requests), and
appends one JSON line per step to ``SPECDEPLOY_STEP_TRACE``.

Stamps are ``time.monotonic()`` (one clock for every process on the host),
so the benchmark cuts the trace by the time window of each of its runs.
The mixin's own cost (two clock reads, the reader, one buffered write) is
timed and written with each record (``selfUs``), so a reading can check it
is small against the step (tens of microseconds against ~40 ms here).

Run by passing ``--scheduler-cls bench.step_trace.traced_scheduler`` with
the repository root on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from specdeploy.runtime.vllm_addon.steps import is_pure_decode, read_step

TRACE_ENV = "SPECDEPLOY_STEP_TRACE"
FACTORY = "bench.step_trace.traced_scheduler"


class StepTrace(NamedTuple):
    """One engine step, as the trace file holds it."""

    start: float
    """``time.monotonic()`` when ``schedule()`` began."""
    end: float
    """``time.monotonic()`` when ``update_from_output()`` returned."""
    batch: int
    """Requests scheduled in the step."""
    decode: bool
    """Every scheduled request decoded (no prefill chunk in the step)."""
    k: int
    """``num_spec_tokens_to_schedule`` of the step: the K in force (0 without speculation)."""
    verified: int
    """Tokens the decoding requests verified: sum of 1 + draft length."""
    drafts: int
    """Decoding requests that carried a draft."""
    draft_tokens: int
    accepted: int
    tokens: int
    """Tokens the decoding requests emitted: accepted drafts plus one each."""
    context: int
    """Context the decoding requests read before the step: sum of their computed tokens."""
    self_us: float
    """The mixin's own time in this step."""


class _TraceMixin:
    """Stamps and reads every step; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        path = os.environ.get(TRACE_ENV)
        # Open for the engine's lifetime (closed with the process): no context manager fits.
        self._trace_file = Path(path).open("a", buffering=1 << 16) if path else None  # noqa: SIM115
        self._trace_started: dict[int, float] = {}

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        output = super().schedule(*args, **kwargs)  # type: ignore[misc]
        if self._trace_file is not None:
            if len(self._trace_started) > 64:
                self._trace_started.clear()
            self._trace_started[id(output)] = began
        return output

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output
        )
        if self._trace_file is None:
            return outputs
        ended = time.monotonic()
        began = self._trace_started.pop(id(scheduler_output), None)
        k = int(scheduler_output.num_spec_tokens_to_schedule)
        if began is not None and scheduler_output.num_scheduled_tokens:
            reading = read_step(scheduler_output, model_runner_output, k)
            proposed = sum(r[1] for r in reading.requests)
            accepted = sum(r[2] for r in reading.requests)
            record = (
                began,
                ended,
                len(scheduler_output.num_scheduled_tokens),
                is_pure_decode(scheduler_output),
                k,
                reading.verified_tokens,
                sum(1 for r in reading.requests if r[1]),
                proposed,
                accepted,
                accepted + len(reading.requests),
                reading.context_tokens,
                (time.monotonic() - ended) * 1e6,
            )
            self._trace_file.write(json.dumps(record) + "\n")
            self._trace_file.flush()
        return outputs


def traced_scheduler(*args: Any, **kwargs: Any) -> Any:
    """The scheduler vLLM would build (the add-on's with a table file), with the trace mixed in."""
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    if vllm_config is None:
        raise TypeError("traced_scheduler: vllm_config is required")
    asynchronous = bool(vllm_config.scheduler_config.async_scheduling)
    if os.environ.get("SPECDEPLOY_TABLE_FILE"):
        from specdeploy.runtime.vllm_addon.scheduler import (
            SpecdeployAsyncScheduler,
            SpecdeployScheduler,
        )

        base: type = SpecdeployAsyncScheduler if asynchronous else SpecdeployScheduler
    else:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler

        base = AsyncScheduler if asynchronous else Scheduler
    traced = type(f"Traced{base.__name__}", (_TraceMixin, base), {})
    return traced(*args, **kwargs)


def read_trace(path: Path, since: float = 0.0, until: float = float("inf")) -> Iterator[StepTrace]:
    """The steps that began in [since, until) (a torn last line is skipped)."""
    if not path.exists():
        return
    with path.open() as lines:
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = StepTrace(*row)
            if since <= step.start < until:
                yield step
