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
* ``update_from_output(scheduler_output, model_runner_output)``: drafts and
  acceptance are read *before* ``super()``, which trims the outputs of
  requests that stop; the step is timed from ``schedule()`` to the end of the
  update, or from the previous update when steps overlap (async scheduling).
* With ``async_scheduling`` the engine needs an ``AsyncScheduler`` subclass,
  otherwise no drafts are verified, hence the factory.

With no table configured vLLM builds no lookup, there is nothing to replace
and the scheduler is plain vLLM (logged). Importing this module imports vLLM.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from specdeploy.runtime.vllm_addon.assembly import Addon, ensure_logging, start_addon
from specdeploy.runtime.vllm_addon.controller import KController
from specdeploy.runtime.vllm_addon.settings import AddonSettings
from specdeploy.runtime.vllm_addon.steps import is_pure_decode, step_drafts, verified_width

log = logging.getLogger("specdeploy.addon")

_PENDING_LIMIT = 256
"""Schedule start times kept for steps whose output has not come back yet."""


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
        self._sd_started: dict[int, float] = {}
        self._sd_last_update = 0.0
        built = self.__dict__.get("dynamic_sd_lookup")
        if built is None:
            log.warning(
                "specdeploy: no num_speculative_tokens_per_batch_size in the speculative "
                "config, so vLLM keeps a fixed K and the add-on stays off"
            )
            return
        cfg: Any = self.vllm_config
        self.specdeploy = start_addon(
            AddonSettings.from_env(),
            list(built),
            num_speculative_tokens=int(self.num_spec_tokens),
            data_parallel_size=int(cfg.parallel_config.data_parallel_size),
        )
        self.__dict__["dynamic_sd_lookup"] = PolicyLookup(list(built), self.specdeploy.controller)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        output = super().schedule(*args, **kwargs)  # type: ignore[misc]
        if self.specdeploy is not None:
            pending = self._sd_started
            if len(pending) >= _PENDING_LIMIT:
                pending.clear()
            pending[id(output)] = started
        return output

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        drafts = step_drafts(scheduler_output, model_runner_output)
        outputs = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output
        )
        self._specdeploy_step_done(scheduler_output, drafts)
        return outputs

    def shutdown(self) -> None:
        if self.specdeploy is not None:
            self.specdeploy.close()
        super().shutdown()  # type: ignore[misc]

    def _specdeploy_step_done(
        self, scheduler_output: Any, drafts: tuple[tuple[int, int], ...]
    ) -> None:
        addon = self.specdeploy
        if addon is None:
            return
        now = time.perf_counter()
        started = self._sd_started.pop(id(scheduler_output), None)
        previous, self._sd_last_update = self._sd_last_update, now
        batch_size = len(scheduler_output.num_scheduled_tokens)
        if batch_size == 0:
            return
        k = int(scheduler_output.num_spec_tokens_to_schedule)
        clean = (
            started is not None
            and is_pure_decode(scheduler_output)
            and verified_width(scheduler_output) == k
        )
        seconds = now - max(started, previous) if clean and started is not None else None
        addon.controller.step_done(batch_size, k, seconds, drafts)


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
