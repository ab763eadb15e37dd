"""The add-on's vLLM schedulers, built by ``specdeploy.runtime.vllm_addon.scheduler_factory``.

Hooks, as of vLLM 0.32 (``vllm/v1/core/sched/scheduler.py``):

* ``Scheduler.__init__`` builds ``self.dynamic_sd_lookup`` (a dense list indexed
  by the number of scheduled requests) from
  ``speculative_config.num_speculative_tokens_per_batch_size``; ``schedule()``
  reads it once per step (``self.dynamic_sd_lookup[len(num_scheduled_tokens)]``)
  and puts the result in ``SchedulerOutput.num_spec_tokens_to_schedule``.
  We replace the list, after ``super().__init__()``, with a ``PolicyLookup``
  whose ``__getitem__`` asks the controller. ``num_speculative_tokens`` is
  never changed (KV lookahead and draft buffers are sized for it).
* ``update_from_output(scheduler_output, model_runner_output)``: every
  decoding request's (K, proposal length, accepted), its verified and
  context tokens are read *before* ``super()``, which trims the outputs of
  requests that stop (``steps.read_step``). K is the one in force when the
  drafts were proposed: the ``num_spec_tokens_to_schedule`` of the step
  scheduled before, kept per scheduled output (async scheduling may
  schedule the next step before this one's update). A step is timed only
  when it is a clean decode step (no prefill) that verified at the K it
  schedules next, from ``schedule()`` to the end of the update, or from the
  previous update when steps overlap (async scheduling): a transition
  step mixes the cost of two K.
* With ``async_scheduling`` the engine needs an ``AsyncScheduler`` subclass,
  otherwise no drafts are verified, hence the factory.

With no table configured vLLM builds no lookup, there is nothing to replace
and the scheduler is plain vLLM (logged). Importing this module imports vLLM.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from specdeploy.runtime.vllm_addon.assembly import Addon, ensure_logging, start_addon
from specdeploy.runtime.vllm_addon.controller import KController
from specdeploy.runtime.vllm_addon.plain_step import empty_at_k0
from specdeploy.runtime.vllm_addon.self_time import SelfTimer, timing_requested
from specdeploy.runtime.vllm_addon.settings import AddonSettings
from specdeploy.runtime.vllm_addon.steps import NO_DECODE, StepReading, is_pure_decode, read_step

log = logging.getLogger("specdeploy.addon")

_PENDING_LIMIT = 256
"""Scheduled outputs remembered until their update (more means updates were lost)."""


class PolicyLookup(list[int]):
    """``dynamic_sd_lookup`` whose every read asks the controller.

    The list keeps vLLM's own entries, so ``len()``, iteration and slicing
    behave as before for any other reader.
    """

    def __init__(self, entries: list[int], controller: KController) -> None:
        super().__init__(entries)
        self.controller = controller

    def __getitem__(self, index: Any) -> Any:
        if type(index) is int:
            return self.controller.choose_k(index)
        return super().__getitem__(index)


class TimedPolicyLookup(PolicyLookup):
    """``PolicyLookup`` that adds its own time to the self-timer (``self_time``)."""

    def __init__(self, entries: list[int], controller: KController, timer: SelfTimer) -> None:
        super().__init__(entries, controller)
        self.timer = timer

    def __getitem__(self, index: Any) -> Any:
        started = time.perf_counter_ns()
        found = super().__getitem__(index)
        self.timer.pending_ns += time.perf_counter_ns() - started
        return found


class _Scheduled(NamedTuple):
    """What ``schedule()`` noted about one output for its update."""

    started: int
    """``time.perf_counter_ns()`` when ``schedule()`` was entered."""
    k_proposed: int
    """K the drafts this output verifies were proposed with (the previous output's)."""


class _AddonMixin:
    """What both schedulers add to vLLM's (see the module docstring).

    Listed first in the bases, so ``super()`` here is vLLM's ``Scheduler``
    or ``AsyncScheduler``.
    """

    specdeploy: Addon | None
    dynamic_sd_lookup: list[int] | None
    vllm_config: Any
    num_spec_tokens: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ensure_logging()
        self.specdeploy = None
        self._sd_scheduled: dict[int, _Scheduled] = {}
        self._sd_last_update = 0
        self._sd_last_k = 0
        self._sd_step_k: int | None = None
        self._sd_timer: SelfTimer | None = None
        built = self.__dict__.get("dynamic_sd_lookup")
        if built is None:
            log.warning(
                "specdeploy: no num_speculative_tokens_per_batch_size in the speculative "
                "config, so vLLM keeps a fixed K and the add-on stays off"
            )
            return
        cfg: Any = self.vllm_config
        settings = AddonSettings.from_env()
        timer = SelfTimer(settings.pool) if timing_requested() else None
        self.specdeploy = start_addon(
            settings,
            list(built),
            num_speculative_tokens=int(self.num_spec_tokens),
            data_parallel_size=int(cfg.parallel_config.data_parallel_size),
            timer=timer,
        )
        controller = self.specdeploy.controller
        lookup: PolicyLookup
        if timer is None:
            lookup = PolicyLookup(list(built), controller)
        else:
            lookup = TimedPolicyLookup(list(built), controller, timer)
            log.info("specdeploy: self-timing on (%s)", "SPECDEPLOY_ADDON_TIMING")
        self._sd_timer = timer
        self.__dict__["dynamic_sd_lookup"] = lookup

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        output = super().schedule(*args, **kwargs)  # type: ignore[misc]
        self._sd_step_k = getattr(output, "num_spec_tokens_to_schedule", None)
        addon = self.specdeploy
        if addon is not None and addon.controller.tripped is None:
            try:
                self._specdeploy_scheduled(output, started)
            except Exception:  # e.g. a vLLM attribute renamed: never the engine's problem
                addon.controller.trip("schedule")
        return output

    def _specdeploy_scheduled(self, output: Any, started: int) -> None:
        timer = self._sd_timer
        began = time.perf_counter_ns() if timer is not None else 0
        pending = self._sd_scheduled
        if len(pending) >= _PENDING_LIMIT:
            pending.clear()
        pending[id(output)] = _Scheduled(started, self._sd_last_k)
        if output.num_scheduled_tokens:
            self._sd_last_k = int(output.num_spec_tokens_to_schedule)
        if timer is not None:
            timer.pending_ns += time.perf_counter_ns() - began

    def specdeploy_drafts_expected(self) -> bool:
        """Whether the step just scheduled leaves drafts for the engine core to fetch.

        Not after a step at K=0 with a drafter whose K=0 proposal is empty
        (``plain_step.EMPTY_AT_K0_METHODS``: the engine core then skips the
        fetch). Read from vLLM's own output, so it holds with the add-on off
        or tripped.
        """
        k = self._sd_step_k
        return k is None or k > 0 or not empty_at_k0(self.vllm_config.speculative_config)

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        addon = self.specdeploy
        if addon is None or addon.controller.tripped is not None:
            return super().update_from_output(  # type: ignore[misc]
                scheduler_output, model_runner_output
            )
        timer = self._sd_timer
        began = time.perf_counter_ns() if timer is not None else 0
        scheduled = self._sd_scheduled.pop(id(scheduler_output), None)
        try:
            k_proposed = self._sd_last_k if scheduled is None else scheduled.k_proposed
            reading: StepReading | None = read_step(
                scheduler_output, model_runner_output, k_proposed
            )
        except Exception:  # read before super trims the outputs; a shape vLLM changed
            addon.controller.trip("read_step")
            reading = None
        read_ns = time.perf_counter_ns() - began if timer is not None else 0
        outputs = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output
        )
        if reading is None:
            return outputs
        try:
            resumed = time.perf_counter_ns() if timer is not None else 0
            self._specdeploy_step_done(scheduler_output, scheduled, reading)
            if timer is not None and scheduled is not None:
                done = time.perf_counter_ns()
                batch_size = len(scheduler_output.num_scheduled_tokens)
                timer.end_step(batch_size, read_ns, done - resumed, done - scheduled.started)
        except Exception:
            addon.controller.trip("step_done")
        return outputs

    def shutdown(self) -> None:
        if self.specdeploy is not None:
            self.specdeploy.close()
        super().shutdown()  # type: ignore[misc]

    def _specdeploy_step_done(
        self, scheduler_output: Any, scheduled: _Scheduled | None, reading: StepReading
    ) -> None:
        addon = self.specdeploy
        assert addon is not None
        now = time.perf_counter_ns()
        previous, self._sd_last_update = self._sd_last_update, now
        batch_size = len(scheduler_output.num_scheduled_tokens)
        if batch_size == 0:
            return
        k = int(scheduler_output.num_spec_tokens_to_schedule)
        clean = (
            scheduled is not None
            and reading is not NO_DECODE
            and reading.k == k
            and is_pure_decode(scheduler_output)
        )
        seconds = None
        if clean and scheduled is not None:
            seconds = (now - max(scheduled.started, previous)) * 1e-9
        addon.controller.finish_step(batch_size, k, seconds, reading)


class SpecdeployScheduler(_AddonMixin, Scheduler):  # type: ignore[misc]  # vLLM is untyped here
    """vLLM's scheduler with K chosen per step by the specdeploy policy."""


class SpecdeployAsyncScheduler(_AddonMixin, AsyncScheduler):  # type: ignore[misc]
    """vLLM's async scheduler with K chosen per step by the specdeploy policy."""


def scheduler_factory(*args: Any, **kwargs: Any) -> Scheduler:
    """The scheduler vLLM should build: async or sync, as its config says."""
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    if vllm_config is None:
        raise TypeError("scheduler_factory: vllm_config is required")
    if vllm_config.scheduler_config.async_scheduling:
        return SpecdeployAsyncScheduler(*args, **kwargs)
    return SpecdeployScheduler(*args, **kwargs)
