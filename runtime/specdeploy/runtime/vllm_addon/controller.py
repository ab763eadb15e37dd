"""The add-on's brain, without vLLM: K per step from the policy, steps fed back, tables swapped.

The vLLM scheduler subclass (``scheduler.py``) calls three things:

* ``choose_k(batch_size)`` from the replaced ``dynamic_sd_lookup`` (hot path):
  the policy's K, clamped into the K set the engine started with; vLLM's own
  lookup when the policy is off, no table was ever loaded, or the policy
  raised (never a crash);
* ``finish_step(...)`` from ``update_from_output``: the step's reading
  (``steps.read_step``: per decoding request K, proposal length and
  accepted) becomes the ``StepRecord`` the policy observes (per-position
  counts under the one definition, verified and context tokens, the time of
  a clean decode step), the metrics and the drafting-rate watch;
* ``install(table)`` / ``rejected(reason)`` from the table watcher thread.

Faults: the add-on must never take the engine down. A policy that raises or
answers anything but an int in 0..maxK costs that step (vLLM's own lookup,
counted, logged once). Anything else that raises in the add-on's own step
work - reading a vLLM step whose attributes moved, the metrics, the drafting
watch - trips the fuse (``trip``): from then on every step uses vLLM's own
lookup, the fault is counted by where it happened
(``specdeploy_addon_faults``) and logged once, and the engine keeps serving.

Thread-safety: the watcher thread only rebinds ``self._table`` (one reference
assignment, atomic in CPython); the scheduler thread reads it once per call.
A policy is never shared between two tables, so its state is only touched by
the scheduler thread.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.vllm_addon.drafting import DraftingRateWatch, DraftingWindow, Drift
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from specdeploy.runtime.vllm_addon.steps import StepReading, count_drafts
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
        self._reported: dict[str, int] = {}
        """The policy's step counters as last exported (their increments go out)."""
        self._policy_error_logged = False
        self.last_error: str | None = None
        self._drafting = DraftingRateWatch(None)
        self.tripped: str | None = None
        """Where the fuse tripped (None: the add-on chooses K)."""

    # --- hot path --------------------------------------------------------------

    def choose_k(self, batch_size: int) -> int:
        """K for a step with ``batch_size`` scheduled requests."""
        table = self._table
        policy = None if table is None or self.tripped is not None else table.policy
        if policy is None:
            return self.vllm_k(batch_size)
        try:
            k = policy.choose_k(batch_size)
            if type(k) is not int or k < 0:  # None, a float, a numpy int, -1: a policy bug
                raise TypeError(f"choose_k returned {k!r}, not an int >= 0")
        except Exception:  # a policy bug must not stop the engine
            self._policy_failed("choose_k")
            return self.vllm_k(batch_size)
        return self._clamp[k if k <= self._clamp_last else self._clamp_last]

    def trip(self, where: str) -> None:
        """An add-on fault outside the policy (call from an ``except``): vLLM's own lookup
        from now on; counted by ``where``, logged once with its traceback."""
        first = self.tripped is None
        if first:
            self.tripped = where
        if self.metrics is not None:
            with contextlib.suppress(Exception):  # the metrics may be what failed
                self.metrics.fault(where)
        if first:
            log.exception(
                "specdeploy: add-on fault in %s; vLLM's own schedule from now on (the engine "
                "keeps serving; restart the pod to re-enable the add-on)",
                where,
            )

    def vllm_k(self, batch_size: int) -> int:
        """What vLLM's own lookup (the table the engine started with) says."""
        if batch_size > self._vllm_last:
            return self._vllm[self._vllm_last]
        return self._vllm[batch_size if batch_size > 0 else 0]

    # --- after a step ----------------------------------------------------------

    def finish_step(
        self, batch_size: int, k: int, seconds: float | None, reading: StepReading
    ) -> StepRecord:
        """One finished step: ``k`` the K chosen for it, ``reading`` what it verified.

        ``seconds`` is the step's time when it was a clean decode step (the
        caller decides), else None. Returns the record the policy observed.
        """
        requests = reading.requests
        if requests:
            counts = count_drafts(requests, reading.k)
            record = StepRecord(
                batch_size,
                reading.k,
                seconds,
                counts.reached,
                counts.proposed,
                counts.accepted,
                len(requests),
                reading.verified_tokens,
                reading.context_tokens,
                counts.offered,
                counts.scheduled,
            )
        else:
            record = StepRecord(batch_size, k, seconds)
        table = self._table
        policy = None if table is None else table.policy
        if policy is not None:
            try:
                policy.observe(record)
            except Exception:
                self._policy_failed("observe")
        self.steps += 1
        try:
            if record.reached:
                verdict = self._drafting.add(record.reached[0], record.proposed[0])
                if verdict is not None:
                    self._drafting_verdict(verdict)
            if self.metrics is not None:
                self.metrics.step(k, record)
                if self.steps % SLOW_TICK_STEPS == 0:
                    self._slow_metrics(batch_size)
        except Exception:
            self.trip("metrics")
        return record

    def step_done(
        self,
        batch_size: int,
        k: int,
        seconds: float | None,
        drafts: Sequence[tuple[int, int]],
    ) -> StepRecord:
        """``finish_step`` from (proposal length, accepted) per decoding request, all at ``k``.

        For callers that hold pairs rather than a vLLM step (benchmarks,
        tests); verified tokens are 1 + L per request, context unknown (0).
        """
        requests = tuple((k, length, accepted) for length, accepted in drafts)
        verified = sum(1 + min(length, k) for length, _ in drafts)
        return self.finish_step(batch_size, k, seconds, StepReading(k, requests, verified, 0))

    def _drafting_verdict(self, verdict: DraftingWindow) -> None:
        if self.metrics is not None:
            self.metrics.drafting(verdict)
        if not verdict.changed:
            return
        if verdict.state is Drift.WITHIN:
            log.info(
                "specdeploy: drafting rate back within the profile's: %.3f (profile %.3f)",
                verdict.rate,
                verdict.reference,
            )
            return
        log.warning(
            "specdeploy: drafting rate %.3f is %s the profile's %.3f by more than %.2f over "
            "the last %d sequence-steps: the profile no longer describes this traffic "
            "(re-profile on it, or expect the table's gains to be %s)",
            verdict.rate,
            verdict.state.name.lower(),
            verdict.reference,
            self._drafting.tolerance,
            self._drafting.window,
            "lower" if verdict.state is Drift.BELOW else "understated",
        )

    def _slow_metrics(self, batch_size: int) -> None:
        assert self.metrics is not None
        table = self._table
        policy = None if table is None else table.policy
        for counter, export in (
            ("exploration_steps", self.metrics.explored),
            ("plain_reference_steps", self.metrics.referenced),
        ):
            count = getattr(policy, counter, 0)
            reported = self._reported.get(counter, 0)
            if isinstance(count, int) and count > reported:
                export(count - reported)
                self._reported[counter] = count
        gain = getattr(policy, "gain_over_vanilla", None)
        if gain is not None:
            try:
                self.metrics.gain_over_vanilla(gain(batch_size))
            except Exception:
                self._policy_failed("gain_over_vanilla")
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
        self._reported = {}
        self._policy_error_logged = False
        self._drafting = DraftingRateWatch(table.drafting_rate)
        self._table = table
        self.generation += 1
        self.last_error = None
        if self.metrics is not None:
            self.metrics.table_installed(
                self.generation, table.policy_kind, table.profile_name, table.digest
            )
            self.metrics.profile_drafting_rate(table.drafting_rate)
            self.metrics.profile_acceptance(table.acceptance)
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
