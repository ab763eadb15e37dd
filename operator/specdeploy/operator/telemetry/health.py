"""The ``TelemetryHealthy`` and ``TablesCurrent`` conditions, and which windows may be used. Pure.

TelemetryHealthy:

* Unknown ``NoPrometheus``: neither ``spec.telemetry.prometheusURL`` nor the
  operator's ``SPECDEPLOY_PROMETHEUS_URL``; Unknown ``NoInterval`` until the
  first interval ran; Unknown ``NothingToObserve`` while no pool speculates
  with a ready replica;
* False ``PrometheusUnreachable`` / ``PrometheusBadResponse`` (the whole
  interval failed), ``SeriesMissing`` (a speculating pool with ready replicas
  has no add-on series) or ``SeriesStale`` (its newest sample is older than
  ``stale_intervals`` intervals): the affected pools' tables stay frozen;
* True ``Healthy`` otherwise.

A pool without series before any verdict (the first interval after a
roll-out, before Prometheus' first scrape of the new pods) is Unknown
``SeriesPending``, not False: one interval's grace, then ``SeriesMissing``.

Messages name pools and thresholds, never ages or counts, so that the same
trouble in the next interval writes nothing new.

TablesCurrent says which table the pools serve and why: False ``CostDrift``
(re-profiling, the old table serving), True ``AcceptanceDrift`` (re-derived
from live acceptance), True ``LiveTable`` or ``ProfileTable``, Unknown
``TablesFrozen`` while telemetry is unhealthy, Unknown ``NoTelemetry``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdeploy.operator.api import (
    Condition,
    ConditionStatus,
    FloorState,
    LiveSource,
    Policy,
    PoolStatus,
)
from specdeploy.operator.conditions import condition
from specdeploy.operator.naming import label_value
from specdeploy.operator.telemetry.window import PoolWindow, TelemetryReport

TELEMETRY_HEALTHY = "TelemetryHealthy"
TABLES_CURRENT = "TablesCurrent"
STALE_SLACK_SECONDS = 15.0


@dataclass(frozen=True)
class Health:
    """The condition and the windows that may be used, by pool label."""

    condition: Condition
    windows: Mapping[str, PoolWindow] = field(default_factory=dict)


_OBSERVED_POLICIES = (Policy.ADAPTIVE, Policy.TABLE)
"""The policies whose tables come from a profile and follow live telemetry (a fixed K or no
speculation has no table for the series to correct, so its pools are not waited for)."""


def expected_pools(policy: Policy, previous: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Pool labels that should export add-on series: speculating under a profiled policy, with
    a ready replica (``previous``: the pools' last status by GPU type)."""
    if policy not in _OBSERVED_POLICIES:
        return []
    return [
        label_value(gpu)
        for gpu, pool in previous.items()
        if pool.get("speculating") and int(pool.get("readyReplicas") or 0) >= 1
    ]


def canary_pools(policy: Policy, previous: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Pool labels whose series are used when present but not waited for: pools the live
    floor holds at plain decoding, whose one canary replica speculates (its pod may stay
    Pending where no GPU is free; the pool's timed probe covers that)."""
    if policy not in _OBSERVED_POLICIES:
        return []
    return [
        label_value(gpu)
        for gpu, pool in previous.items()
        if (pool.get("floor") or {}).get("state") == FloorState.PLAIN.value
    ]


def _carried(old_conditions: Sequence[Mapping[str, Any]]) -> Condition | None:
    for cond in old_conditions:
        if cond.get("type") == TELEMETRY_HEALTHY:
            try:
                return Condition.model_validate(
                    {k: v for k, v in cond.items() if k in ("type", "status", "reason", "message")}
                )
            except ValueError:
                return None
    return None


def telemetry_health(
    *,
    url: str | None,
    report: TelemetryReport | None,
    expected: Sequence[str],
    interval_seconds: float,
    stale_intervals: float,
    old_conditions: Sequence[Mapping[str, Any]] = (),
    optional: Sequence[str] = (),
) -> Health:
    """TelemetryHealthy from this interval's report (None: carry the last verdict over).

    ``expected``: the pool labels that should have series (speculating, a
    ready replica); ``optional``: labels whose fresh windows are used but whose
    absence says nothing (``canary_pools``).
    """
    if url is None:
        message = "no spec.telemetry.prometheusURL and no SPECDEPLOY_PROMETHEUS_URL"
        return Health(
            condition(TELEMETRY_HEALTHY, ConditionStatus.UNKNOWN, "NoPrometheus", message)
        )
    if report is None:
        carried = _carried(old_conditions)
        waiting = condition(
            TELEMETRY_HEALTHY, ConditionStatus.UNKNOWN, "NoInterval", f"reading {url}"
        )
        return Health(carried or waiting)
    if report.problem is not None:
        message = f"{url}: {report.detail}; tables frozen"
        return Health(
            condition(TELEMETRY_HEALTHY, ConditionStatus.FALSE, report.problem.value, message)
        )
    limit = stale_intervals * interval_seconds + STALE_SLACK_SECONDS
    canaries = {
        p: w
        for p, w in report.windows.items()
        if p in optional
        and p not in expected
        and w.age_seconds is not None
        and w.age_seconds <= limit
    }
    if not expected:
        message = "no pool speculates with a ready replica"
        return Health(
            condition(TELEMETRY_HEALTHY, ConditionStatus.UNKNOWN, "NothingToObserve", message),
            canaries,
        )
    missing = [p for p in expected if p not in report.windows]
    stale = [
        p
        for p in expected
        if p in report.windows
        and (report.windows[p].age_seconds is None or report.windows[p].age_seconds > limit)  # type: ignore[operator]
    ]
    usable = {p: w for p, w in report.windows.items() if p in expected and p not in stale}
    usable.update(canaries)
    if missing:
        message = f"no add-on series for pool(s) {', '.join(missing)}; their tables frozen"
        carried = _carried(old_conditions)
        if carried is None or (
            carried.status is ConditionStatus.UNKNOWN and carried.reason != "SeriesPending"
        ):
            pending = condition(
                TELEMETRY_HEALTHY, ConditionStatus.UNKNOWN, "SeriesPending", message
            )
            return Health(pending, usable)
        return Health(
            condition(TELEMETRY_HEALTHY, ConditionStatus.FALSE, "SeriesMissing", message), usable
        )
    if stale:
        message = (
            f"newest add-on sample of pool(s) {', '.join(stale)} older than {limit:.0f}s; "
            "their tables frozen"
        )
        return Health(
            condition(TELEMETRY_HEALTHY, ConditionStatus.FALSE, "SeriesStale", message), usable
        )
    message = f"{len(usable)} pool(s) observed"
    return Health(condition(TELEMETRY_HEALTHY, ConditionStatus.TRUE, "Healthy", message), usable)


def tables_condition(pools: Sequence[PoolStatus], health: Condition) -> Condition:
    """Which table the pools serve, and why (module docstring)."""
    if health.reason == "NoPrometheus":
        return condition(
            TABLES_CURRENT, ConditionStatus.UNKNOWN, "NoTelemetry", "profile tables only"
        )
    drifting = [p for p in pools if p.live is not None and p.live.cost_drift]
    if drifting:
        detail = "; ".join(
            f"{p.gpu_type}: live step times {p.live.cost_ratio}x the profile's"
            for p in drifting
            if p.live is not None
        )
        message = f"{detail}; re-profiling, the old table serves meanwhile"
        return condition(TABLES_CURRENT, ConditionStatus.FALSE, "CostDrift", message)
    if health.status is ConditionStatus.FALSE:
        return condition(TABLES_CURRENT, ConditionStatus.UNKNOWN, "TablesFrozen", health.reason)
    live = [p for p in pools if p.live is not None and p.live.source is LiveSource.LIVE]
    moved = [p for p in live if p.live is not None and p.live.acceptance_drift]
    if moved:
        names = ", ".join(p.gpu_type for p in moved)
        message = f"{names}: acceptance left the profile's; table re-derived from live acceptance"
        return condition(TABLES_CURRENT, ConditionStatus.TRUE, "AcceptanceDrift", message)
    if live:
        names = ", ".join(p.gpu_type for p in live)
        return condition(TABLES_CURRENT, ConditionStatus.TRUE, "LiveTable", f"{names}: live table")
    return condition(
        TABLES_CURRENT, ConditionStatus.TRUE, "ProfileTable", "profile tables in force"
    )
