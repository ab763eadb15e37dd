"""The add-on's Prometheus metrics, served on a port of its own.

The scheduler runs in vLLM's engine-core process, not in the API server that
serves vLLM's ``/metrics``, so the add-on keeps its own registry and HTTP
endpoint (``SPECDEPLOY_METRICS_PORT``). Names start with ``specdeploy_`` and
every series carries the pool's GPU type (``pool``), so the operator's
telemetry loop can aggregate per pool with PromQL.

The series every step touches are plain integers in ``step_series``,
turned into metric families only when scraped: a step takes no lock. The
rest (table info, reload and policy errors, the drafting-rate verdicts)
change rarely and use ``prometheus_client``'s own objects.

Draft counters follow the one definition (``goodput``): per position i,
``specdeploy_draft_positions_reached_total`` counts decoding sequences that
verified a step with K >= i and accepted positions < i (a position the
drafter did not propose counts as reached and rejected),
``specdeploy_draft_tokens_total`` those that also had a draft there
(proposed) and ``specdeploy_accepted_tokens_total`` those that accepted it.
So accepted / reached is a_i (what AL(K) and the schedule use), proposed /
reached the drafting rate q_i, and accepted / proposed the acceptance
*given a proposal*, which alone overstates what n-gram drafting earns.
``specdeploy_acceptance_profile{position}`` is the profile's a_i for the
table in force: live accepted / reached far below it is an acceptance
collapse (the chart's SpeculationAcceptanceCollapse alert).
"""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from specdeploy.runtime.contract import Series, SeriesLabel
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.vllm_addon.drafting import DraftingWindow, Drift
from specdeploy.runtime.vllm_addon.step_series import StepSeries

__all__ = ["STEP_SECONDS_BUCKETS", "AddonMetrics"]

STEP_SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
)
"""Doubling from 1 ms (a small model's decode on an H200) to 5 s (a CPU step)."""


class AddonMetrics:
    """Every series the add-on exports, in a registry of its own."""

    def __init__(self, pool: str, max_k: int, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.pool = pool
        r, p = self.registry, [SeriesLabel.POOL.value]
        self.series = StepSeries(pool, max_k, STEP_SECONDS_BUCKETS)
        """The per-step series, plain integers collected at scrape time (``step_series``)."""
        r.register(self.series)
        self.drafting_rate = Gauge(
            Series.DRAFTING_RATE,
            "Share of sequence-steps with a draft at position 1, over the last window",
            p,
            registry=r,
        )
        self.drafting_rate_profile = Gauge(
            Series.DRAFTING_RATE_PROFILE,
            "The profile's drafting rate at position 1 (acceptance.draftingRate)",
            p,
            registry=r,
        )
        self.drafting_drift = Gauge(
            Series.DRAFTING_RATE_DRIFT,
            "Last window's drafting rate against the profile's: -1 below, 0 within, 1 above",
            p,
            registry=r,
        )
        self.drafting_drift_windows = Counter(
            Series.DRAFTING_RATE_DRIFT_WINDOWS,
            "Windows whose drafting rate left the profile's by more than the tolerance",
            [*p, "direction"],
            registry=r,
        )
        self.acceptance_profile = Gauge(
            Series.ACCEPTANCE_PROFILE,
            "The profile's acceptance a_i of the table in force, by draft position (the "
            "reference of live accepted / reached; absent without a profile)",
            [*p, SeriesLabel.POSITION.value],
            registry=r,
        )
        self.predicted_goodput = Gauge(
            Series.PREDICTED_GOODPUT,
            "The policy's predicted goodput for the K in force at the smoothed batch size",
            p,
            registry=r,
        )
        self.predicted_gain = Gauge(
            Series.PREDICTED_GAIN,
            "The policy's predicted goodput for the K in force over plain decoding's, at the "
            "smoothed batch size (below 1: speculation loses; absent without a profiled baseline)",
            p,
            registry=r,
        )
        self.table_generation = Gauge(
            Series.TABLE_GENERATION,
            "Tables installed since start (1: the first)",
            p,
            registry=r,
        )
        self.table_info = Gauge(
            Series.TABLE_INFO,
            "The table in force (value 1)",
            [*p, "policy", "profile", "digest"],
            registry=r,
        )
        self.reload_errors = Counter(
            Series.TABLE_RELOAD_ERRORS,
            "Table files rejected (the last good table stays)",
            p,
            registry=r,
        )
        self.policy_errors = Counter(
            Series.POLICY_ERRORS,
            "Policy calls that raised (the step fell back to vLLM's own schedule)",
            p,
            registry=r,
        )
        self.faults = Counter(
            Series.ADDON_FAULTS,
            "Add-on faults outside the policy, by where; the first one switches the add-on off "
            "(vLLM's own schedule until the pod restarts)",
            [*p, "where"],
            registry=r,
        )
        self.exploration_steps = Counter(
            Series.EXPLORATION_STEPS,
            "Steps run at a K other than the policy's best, to learn",
            p,
            registry=r,
        )
        self.plain_reference_steps = Counter(
            Series.PLAIN_REFERENCE_STEPS,
            "Steps run at K=0 while a K >= 1 is in force: the live plain-decoding reference",
            p,
            registry=r,
        )
        # At 0 from the start: the first rejected file is then an increase an
        # alert sees, not a new series that increase() cannot rate (and a dashboard
        # shows 0 rather than "no data"); the same for policy errors.
        self.reload_errors.labels(pool)
        self.policy_errors.labels(pool)
        self._info: tuple[str, str, str] | None = None
        self._positions = 0

    def step(self, k: int, record: StepRecord) -> None:
        """One finished step: ``k`` the K chosen for it, ``record`` what it verified."""
        self.series.record(k, record)

    def drafting(self, verdict: DraftingWindow) -> None:
        """A closed drafting-rate window (``drafting.DraftingRateWatch``)."""
        self.drafting_rate.labels(self.pool).set(verdict.rate)
        self.drafting_drift.labels(self.pool).set(verdict.state.value)
        if verdict.state is not Drift.WITHIN:
            self.drafting_drift_windows.labels(self.pool, verdict.state.name.lower()).inc()

    def profile_drafting_rate(self, rate: float | None) -> None:
        """The drafting rate of the table in force's profile (removed when it has none)."""
        gauge = self.drafting_rate_profile
        if rate is None:
            with contextlib.suppress(KeyError):  # never set
                gauge.remove(self.pool)
            return
        gauge.labels(self.pool).set(rate)

    def profile_acceptance(self, per_position: tuple[float, ...]) -> None:
        """The a_i of the table in force's profile (positions it lacks removed)."""
        gauge = self.acceptance_profile
        for i, a in enumerate(per_position):
            gauge.labels(self.pool, str(i + 1)).set(a)
        for i in range(len(per_position), self._positions):
            gauge.remove(self.pool, str(i + 1))
        self._positions = len(per_position)

    def table_installed(self, generation: int, policy: str, profile: str, digest: str) -> None:
        if self._info is not None:
            self.table_info.remove(self.pool, *self._info)
        self._info = (policy, profile, digest[:12])
        self.table_info.labels(self.pool, *self._info).set(1)
        self.table_generation.labels(self.pool).set(generation)

    def reload_failed(self) -> None:
        self.reload_errors.labels(self.pool).inc()

    def policy_failed(self) -> None:
        self.policy_errors.labels(self.pool).inc()

    def fault(self, where: str) -> None:
        self.faults.labels(self.pool, where).inc()

    def explored(self, steps: int) -> None:
        if steps > 0:
            self.exploration_steps.labels(self.pool).inc(steps)

    def referenced(self, steps: int) -> None:
        if steps > 0:
            self.plain_reference_steps.labels(self.pool).inc(steps)

    def goodput(self, tokens_per_second: float) -> None:
        self.predicted_goodput.labels(self.pool).set(tokens_per_second)

    def gain_over_vanilla(self, gain: float | None) -> None:
        """What the operator's floor reads (removed while the profile has no baseline)."""
        if gain is None:
            with contextlib.suppress(KeyError):  # never set
                self.predicted_gain.remove(self.pool)
            return
        self.predicted_gain.labels(self.pool).set(gain)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Start the HTTP endpoint in a daemon thread; returns the server."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
