"""A vLLM scheduler that forces K and records every step: the profiler's probe.

vLLM 0.32 reads K once per step from ``Scheduler.dynamic_sd_lookup`` (built
from ``num_speculative_tokens_per_batch_size``, indexed by the number of
scheduled requests). Replacing that list, after ``super().__init__()``, with
one whose every entry is the profiler's K forces K whatever the batch size;
the table must be configured for the lookup to exist at all.

Each step is timed from ``schedule()`` to the end of ``update_from_output()``
(forward, sampling and drafting happen in between, in sync scheduling), and
read in ``update_from_output`` *before* calling super, which trims
``sampled_token_ids`` when a request stops: per decoding request the
triple (K, proposal length, accepted), a request whose drafter proposed
nothing included, with the tokens verified and the context read
(``vllm_addon.steps.read_step``). K is the forced K of the step scheduled
before (the drafts were proposed after its forward pass), so a step right
after the profiler changed K verifies the old K; the backend keeps only
steps whose verified K is the cell's.

``RecordingScheduler`` alone records the plain engine of the baseline (no
speculation configured, ``vllm_baseline``).

This is the profiler's probe, not the serving add-on
(``specdeploy.runtime.vllm_addon``), though both read steps with the same
helpers (``vllm_addon.steps``). It lives in the engine-core process, which
the profiler keeps in its own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
so it reads the records directly. Importing this module imports vLLM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

from specdeploy.runtime.vllm_addon.steps import StepReading, is_pure_decode, read_step


@dataclass(frozen=True)
class EngineStep:
    """One engine step as the scheduler saw it."""

    seconds: float
    num_requests: int
    num_tokens: int
    pure_decode: bool
    """Every scheduled request decoded (no prefill chunk, no new request)."""
    reading: StepReading
    """Per decoding request (K, proposal length, accepted); verified and context tokens."""


class ForcedK(list[int]):
    """A ``dynamic_sd_lookup`` whose every entry is one K, set by the profiler."""

    def __init__(self, entries: list[int], k: int) -> None:
        super().__init__(entries)
        self.k = k

    def __getitem__(self, index: Any) -> Any:
        return self.k


class RecordingScheduler(Scheduler):  # type: ignore[misc]  # vLLM is untyped here
    """vLLM's scheduler keeping a record of each step (module docstring).

    On its own it is the baseline engine's probe: plain decoding, no
    speculation configured, every step read the same way.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[EngineStep] = []
        self._started = 0.0
        self._k_last = 0
        self._k_verified = 0

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._started = time.perf_counter()
        output = super().schedule(*args, **kwargs)
        self._k_verified = self._k_last
        if output.num_scheduled_tokens:
            self._k_last = int(output.num_spec_tokens_to_schedule)
        return output

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        reading = read_step(scheduler_output, model_runner_output, self._k_verified)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.records.append(
            EngineStep(
                seconds=time.perf_counter() - self._started,
                num_requests=len(scheduler_output.num_scheduled_tokens),
                num_tokens=scheduler_output.total_num_scheduled_tokens,
                pure_decode=is_pure_decode(scheduler_output),
                reading=reading,
            )
        )
        return outputs


class MeasuringScheduler(RecordingScheduler):
    """The recording scheduler with a forced K (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        built: list[int] | None = self.__dict__.get("dynamic_sd_lookup")
        if built is None:
            raise RuntimeError(
                "the measuring scheduler needs num_speculative_tokens_per_batch_size set"
            )
        self._lookup = ForcedK(built, k=0)
        self.__dict__["dynamic_sd_lookup"] = self._lookup

    @property
    def forced_k(self) -> int:
        return self._lookup.k

    @forced_k.setter
    def forced_k(self, k: int) -> None:
        self._lookup.k = k
