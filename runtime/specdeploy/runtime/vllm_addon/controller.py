"""The add-on's brain, without vLLM: K per step from the policy, steps fed back, tables swapped.

The vLLM scheduler subclass (``scheduler.py``) calls three things:

* ``choose_k(batch_size)`` from the replaced ``dynamic_sd_lookup`` (hot path):
  the policy's K, clamped into the K set the engine started with; vLLM's own
  lookup when the policy is off, no table was ever loaded, or the policy
  raised (never a crash);
* ``step_done(...)`` from ``update_from_output``: feeds the policy and the
  metrics;
* ``install(table)`` / ``rejected(reason)`` from the table watcher thread.

Thread-safety: the watcher thread only rebinds ``self._table`` (one reference
assignment, atomic in CPython); the scheduler thread reads it once per call.
A policy is never shared between two tables, so its state is only touched by
the scheduler thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from specdeploy.runtime.vllm_addon.steps import conditional_from_drafts
from specdeploy.runtime.vllm_addon.table_source import EngineShape, LoadedTable, clamp_map

log = logging.getLogger("specdeploy.addon")

SLOW_TICK_STEPS = 64
"""Steps between two refreshes of the slow metrics (predicted goodput, exploration)."""


class KController:
    """Chooses K per step for one engine; see the module docstring."""

    def __init__(
        self,
        vllm_lookup: Sequence[int],
        shape: EngineShape,
        metrics: AddonMetrics | None = None,
    ) -> None:
        self.shape = shape
        self.metrics = metrics
        self._vllm = list(vllm_lookup)
        self._vllm_last = len(self._vllm) - 1
        self._clamp = clamp_map(shape.allowed_k, shape.num_speculative_tokens)
        self._clamp_last = len(self._clamp) - 1
        self._table: LoadedTable | None = None
        self.generation = 0
        self.steps = 0
        self._explored_reported = 0
        self._policy_error_logged = False
        self.last_error: str | None = None

    # --- hot path --------------------------------------------------------------

    def choose_k(self, batch_size: int) -> int:
        """K for a step with ``batch_size`` scheduled requests."""
        table = self._table
        policy = None if table is None else table.policy
        if policy is None:
            return self.vllm_k(batch_size)
        try:
            k = policy.choose_k(batch_size)
        except Exception:  # a policy bug must not stop the engine
            self._policy_failed("choose_k")
            return self.vllm_k(batch_size)
        return self._clamp[k if k <= self._clamp_last else self._clamp_last]

    def vllm_k(self, batch_size: int) -> int:
        """What vLLM's own lookup (the table the engine started with) says."""
        if batch_size > self._vllm_last:
            return self._vllm[self._vllm_last]
        return self._vllm[batch_size if batch_size > 0 else 0]

    # --- after a step ----------------------------------------------------------

    def step_done(
        self,
        batch_size: int,
        k: int,
        seconds: float | None,
        drafts: Sequence[tuple[int, int]],
    ) -> None:
        """One finished step: ``drafts`` holds (drafted, accepted) per request verified."""
        drafted, accepted = conditional_from_drafts(drafts, self.shape.num_speculative_tokens)
        table = self._table
        policy = None if table is None else table.policy
        if policy is not None:
            try:
                policy.observe(StepRecord(batch_size, k, seconds, drafted, drafted, accepted))
            except Exception:
                self._policy_failed("observe")
        self.steps += 1
        if self.metrics is not None:
            self.metrics.step(batch_size, k, seconds, drafted, accepted)
            if self.steps % SLOW_TICK_STEPS == 0:
                self._slow_metrics(batch_size)

    def _slow_metrics(self, batch_size: int) -> None:
        assert self.metrics is not None
        table = self._table
        policy = None if table is None else table.policy
        explored = getattr(policy, "exploration_steps", 0)
        if isinstance(explored, int) and explored > self._explored_reported:
            self.metrics.explored(explored - self._explored_reported)
            self._explored_reported = explored
        explain = getattr(policy, "explain", None)
        if explain is None:
            return
        try:
            estimates = explain(batch_size)
        except Exception:
            self._policy_failed("explain")
            return
        chosen = [e.goodput for e in estimates.values() if e.chosen]
        if chosen:
            self.metrics.goodput(chosen[0])

    # --- tables ----------------------------------------------------------------

    @property
    def table(self) -> LoadedTable | None:
        """The table in force (None: vLLM's own lookup)."""
        return self._table

    def install(self, table: LoadedTable) -> None:
        """Make ``table`` the one in force (called from the watcher thread)."""
        self._explored_reported = 0
        self._policy_error_logged = False
        self._table = table
        self.generation += 1
        self.last_error = None
        if self.metrics is not None:
            self.metrics.table_installed(
                self.generation, table.policy_kind, table.profile_name, table.digest
            )
        log.info(
            "specdeploy: table %d in force: policy %s, profile %s, schedule %s",
            self.generation,
            table.policy_kind,
            table.profile_name or "-",
            [list(r) for r in table.schedule],
        )

    def rejected(self, reason: str) -> None:
        """A table file the watcher could not use; logged once per distinct reason."""
        if self.metrics is not None:
            self.metrics.reload_failed()
        if reason != self.last_error:
            keeping = "the last good table" if self._table else "vLLM's own schedule"
            log.warning("specdeploy: table rejected, keeping %s: %s", keeping, reason)
        self.last_error = reason

    def _policy_failed(self, where: str) -> None:
        if self.metrics is not None:
            self.metrics.policy_failed()
        if not self._policy_error_logged:
            self._policy_error_logged = True
            log.exception("specdeploy: policy %s raised; this step uses vLLM's own schedule", where)
