"""The telemetry timer: one operator-wide loop that asks Prometheus for every due deployment.

Why one loop and not a kopf timer per SpeculativeDeployment: the queries
batch. Every tick (``tick_seconds``) the loop lists the deployments, takes
those whose ``spec.telemetry.interval`` is due, groups them by (Prometheus
URL, interval) and asks each group's Prometheus one query per metric family
for all of them (``queries``), so a fleet costs O(families) queries per
interval, not O(deployments x pools x positions). A kopf timer per object
would also make kopf patch the object to track the timer; this loop writes
nothing of its own to deployments.

What it does with the answers: each deployment's windows go to the
reconciler (``deliver``), whose ordinary reconcile decides and writes
status and tables (the one writer of both). Then, from the deployments'
recorded views, it merges each SpeculationProfile's ``status.live``
(``profile_live``) and patches it when it changed. A failure of Prometheus
becomes a report with ``problem`` set (TelemetryHealthy False, tables
frozen); any other error is logged and the loop goes on: telemetry never
takes the operator down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specdeploy.operator.api import DEPLOYMENT_KIND, PROFILE_KIND
from specdeploy.operator.clients import k8s
from specdeploy.operator.clients.prometheus import PromClient
from specdeploy.operator.clients.watch_cache import WatchCache
from specdeploy.operator.config import Clock, utc_now
from specdeploy.operator.naming import label_value
from specdeploy.operator.observed import read_profile
from specdeploy.operator.reactor.metrics import OperatorMetrics
from specdeploy.operator.telemetry.assess import profile_digest
from specdeploy.operator.telemetry.interval import IntervalError, parse_interval
from specdeploy.operator.telemetry.profile_live import contributions, merged_view, status_patch
from specdeploy.operator.telemetry.queries import Target, build_queries, windows_from
from specdeploy.operator.telemetry.settings import DEFAULT_SETTINGS, TelemetrySettings
from specdeploy.operator.telemetry.vector import PrometheusError
from specdeploy.operator.telemetry.window import PoolWindow, TelemetryReport
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import MERGE_PATCH

log = logging.getLogger("specdeploy.operator.telemetry")
Key = tuple[str, str]
Deliver = Callable[[str, str, TelemetryReport], Awaitable[None]]
Group = tuple[str, float]
"""(Prometheus URL, interval in seconds): deployments asked together."""


def telemetry_of(body: Mapping[str, Any], default_url: str | None) -> Group | None:
    """Where and how often a deployment's telemetry is read; None: not at all."""
    telemetry = (body.get("spec") or {}).get("telemetry") or {}
    url = telemetry.get("prometheusURL") or default_url
    if not url:
        return None
    try:
        return str(url), parse_interval(str(telemetry.get("interval") or "60s"))
    except IntervalError:
        return None  # validation reports the spec; nothing to read meanwhile


def longest_interval(bodies: Iterable[Mapping[str, Any]], default_url: str | None) -> float | None:
    """The longest interval among the deployments whose telemetry is read (None: none is).

    Every deployment read is due at least this often, so a loop that has not
    completed a cycle for a few of these has stalled (the TelemetryStale alert).
    """
    intervals = [g[1] for g in (telemetry_of(b, default_url) for b in bodies) if g is not None]
    return max(intervals, default=None)


def due_groups(
    bodies: Iterable[Mapping[str, Any]],
    next_due: dict[Key, float],
    *,
    now: float,
    default_url: str | None,
) -> dict[Group, list[Key]]:
    """The deployments due now, by group; ``next_due`` advanced for them (and pruned)."""
    groups: dict[Group, list[Key]] = {}
    seen = set()
    for body in bodies:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        group = telemetry_of(body, default_url)
        if group is None:
            continue
        seen.add(key)
        if next_due.get(key, 0.0) <= now:
            next_due[key] = now + group[1]
            groups.setdefault(group, []).append(key)
    for gone in set(next_due) - seen:
        del next_due[gone]
    return groups


def reports_for(
    url: str, window: float, keys: Sequence[Key], windows: Mapping[tuple[str, str, str], PoolWindow]
) -> dict[Key, TelemetryReport]:
    """Each deployment's windows, by pool label."""
    out = {}
    for namespace, name in keys:
        label = label_value(name)
        mine = {
            pool: w for (ns, dep, pool), w in windows.items() if ns == namespace and dep == label
        }
        out[(namespace, name)] = TelemetryReport(url, window, mine)
    return out


@dataclass
class TelemetryLoop:
    """The timer (module docstring); ``deliver`` hands a report to the reconciler."""

    api: k8s.Api
    deliver: Deliver
    default_url: str | None = None
    settings: TelemetrySettings = DEFAULT_SETTINGS
    namespaces: tuple[str, ...] = ()
    tick_seconds: float = 5.0
    monotonic: Callable[[], float] = time.monotonic
    clock: Clock = utc_now
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    """Where intervals, queries and cycles are counted (``main`` passes the served one)."""
    cache: WatchCache | None = None
    """The watches' view (``watch_cache``): deployments and profiles read from it, not
    listed every tick (500 deployments' bodies every 5 s, and a GET per profile)."""
    _next_due: dict[Key, float] = field(default_factory=dict)

    async def run(self) -> None:
        """Tick until cancelled."""
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    await self.tick(session)
                except asyncio.CancelledError:
                    raise
                except k8s.API_ERRORS as err:
                    # The API server unreachable or refusing (a restart, an outage): one
                    # line, not a traceback per tick; the tick after it tries again.
                    log.warning("telemetry tick: the API did not answer (%s); trying again", err)
                except Exception:  # telemetry never takes the operator down; a bug shows whole
                    log.exception("telemetry tick failed; trying again next tick")
                await asyncio.sleep(self.tick_seconds)

    async def tick(self, session: aiohttp.ClientSession) -> None:
        started = time.perf_counter()
        bodies = await asyncio.to_thread(self._list)
        self.metrics.known(bodies)
        self.metrics.interval(longest_interval(bodies, self.default_url))
        await asyncio.to_thread(self._update_profiles, bodies)
        groups = due_groups(
            bodies, self._next_due, now=self.monotonic(), default_url=self.default_url
        )
        for (url, window), keys in groups.items():
            reports = await self.fetch(session, url, window, keys)
            self.metrics.interval_ran(len(reports))
            for (namespace, name), report in reports.items():
                await self.deliver(namespace, name, report)
        if groups:  # a tick with nothing due is not a cycle: it would hide the last one's time
            self.metrics.cycle(time.perf_counter() - started)

    async def fetch(
        self, session: aiohttp.ClientSession, url: str, window: float, keys: Sequence[Key]
    ) -> dict[Key, TelemetryReport]:
        """One query per family for every deployment of the group; a failure for all of them."""
        client = PromClient(
            url,
            session,
            timeout_seconds=self.settings.timeout_seconds,
            max_response_bytes=self.settings.max_response_bytes,
            observe=self.metrics.queried,
        )
        targets = [Target(ns, label_value(name)) for ns, name in keys]
        try:
            answers = await client.query_all(
                build_queries(targets, window), concurrency=self.settings.max_concurrency
            )
        except PrometheusError as err:
            log.warning("telemetry from %s failed: %s", url, err)
            return {
                k: TelemetryReport(url, window, problem=err.problem, detail=str(err)) for k in keys
            }
        return reports_for(url, window, keys, windows_from(answers, window_seconds=window))

    # --- API reads and the profiles' status -------------------------------------

    def _list(self) -> list[dict[str, Any]]:
        if self.cache is not None and DEPLOYMENT_KIND in self.cache.kinds:
            return self.cache.items_or_list(self.api, DEPLOYMENT_KIND)
        scopes: tuple[str | None, ...] = self.namespaces or (None,)
        return [
            item
            for scope in scopes
            for item in k8s.list_items(self.api, paths.path(DEPLOYMENT_KIND, scope))
        ]

    def _update_profiles(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        for (namespace, name), sources in sorted(contributions(bodies).items()):
            try:
                self._update_profile(namespace, name, sources)
            except k8s.API_ERRORS as err:
                log.warning("%s/%s: profile status not updated: %s", namespace, name, err)

    def _update_profile(self, namespace: str, name: str, sources: list[tuple[str, Any]]) -> None:
        if self.cache is not None and self.cache.synced(PROFILE_KIND):
            profile = self.cache.get(PROFILE_KIND, namespace, name)
        else:
            profile = k8s.get_or_none(self.api, paths.path(PROFILE_KIND, namespace, name))
        if profile is None:
            return
        view = read_profile(profile)
        digest = None if view.document is None else profile_digest(view.document)
        patch = status_patch(
            profile,
            merged_view(sources, digest, self.settings),
            now=self.clock(),
            tolerance=self.settings.record_tolerance,
        )
        if patch is None:
            return
        log.info("%s/%s: profile live status updated", namespace, name)
        self.api.request(
            "PATCH",
            paths.path(PROFILE_KIND, namespace, name, "status"),
            body={"status": patch},
            content_type=MERGE_PATCH,
        )
