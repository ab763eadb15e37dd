"""The Reconciler: which deployment to reconcile when, one at a time each, with backoff.

Reconciles of one deployment never overlap (a lock per deployment) and
coalesce: events that arrive while one waits are answered by that one. At
most ``workers`` run at once, woken fairly (``work_queue``: spec changes
first, then namespace by namespace). Any failure retries after a
per-deployment backoff, 5 s doubling to 300 s with 10% jitter (events wait
for it; a spec change does not); a failed fan-out (a namespace's or the
cluster's list of deployments) is retried the same way rather than dropped.
The telemetry loop's reports arrive here (``deliver``) and ride on the next
reconcile as the operator's ``Memory``. The kopf handlers (``handlers``)
only call into it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specdeploy.operator.api import DEPLOYMENT_KIND
from specdeploy.operator.clients import k8s
from specdeploy.operator.clients.watch_cache import WatchCache, slim
from specdeploy.operator.config import DEFAULT_CONFIG, Clock, Config, utc_now
from specdeploy.operator.discovery import node_signature, selector_keys
from specdeploy.operator.reactor.metrics import OperatorMetrics, Outcome
from specdeploy.operator.reactor.reconcile import ScaleMemory, reconcile_once
from specdeploy.operator.reactor.work_queue import FairSlots
from specdeploy.operator.telemetry.window import TelemetryReport

Key = tuple[str, str]
log = logging.getLogger("specdeploy.operator")


@dataclass
class Reconciler:
    """Runs reconciles off the event loop, one at a time per deployment."""

    api: k8s.Api
    config: Config = DEFAULT_CONFIG
    clock: Clock = utc_now
    retry_seconds: float = 5.0
    """The first retry's delay after a failure; doubled per consecutive failure."""
    retry_max_seconds: float = 300.0
    namespaces: tuple[str, ...] = ()
    """Watched namespaces; empty: all."""
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    """Where reconciles are counted (a private registry unless ``main`` passes the served one)."""
    monotonic: Callable[[], float] = time.perf_counter
    """Times each reconcile for the duration histogram (injected: tests control it)."""
    _locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    _queued: set[Key] = field(default_factory=set)
    _retrying: set[Key] = field(default_factory=set)
    _nodes: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)
    _sweep_pending: bool = False
    _reports: dict[Key, TelemetryReport] = field(default_factory=dict)
    """The telemetry loop's latest interval per deployment, until a reconcile used it."""
    _generations: dict[Key, object] = field(default_factory=dict)
    _failures: dict[Key, int] = field(default_factory=dict)
    """Consecutive failed reconciles per deployment (its backoff; cleared on success)."""
    _scale: ScaleMemory = field(default_factory=dict)
    """The autoscaler's state per deployment and pool (``reconcile.reconcile_once``)."""
    cache: WatchCache | None = None
    """The watches' view that reconciles read (``watch_cache``); None: list every time."""
    workers: int = 4
    """Reconciles running at once (threads); the rest wait in ``work_queue.FairSlots``."""
    _slots: FairSlots | None = None
    _from_cache: set[Key] = field(default_factory=set)
    """Queued reconciles that no event asked for (the resync, a telemetry interval): they
    may read the deployment from the watches' view instead of a GET each."""
    _awaiting: dict[Key, str] = field(default_factory=dict)
    """The resourceVersion of the operator's last status write per deployment, until the
    watches' view shows it: until then that view may predate the write, and a decision
    from it would repeat the write's transitions (their Events)."""

    async def deliver(self, namespace: str, name: str, report: TelemetryReport) -> None:
        """The telemetry loop's interval for a deployment: reconcile with it (coalesced)."""
        self._reports[(namespace, name)] = report
        await self.reconcile(namespace, name, cached=True)

    async def reconcile(
        self, namespace: str, name: str, *, urgent: bool = False, cached: bool = False
    ) -> None:
        """Reconcile one deployment now, unless it is backing off after a failure.

        While a retry is scheduled, an event (a child, a profile, a node, the resync)
        waits for that retry, which reads the newest state anyway: otherwise every
        event of a busy namespace re-sent a refused write at once, about 100 a minute
        (found by the fuzzer; review I8 asks at most 2). ``urgent``: the user changed
        the spec, which may be the fix, so it goes now. ``cached``: no event asked for
        it, so the watches' view of the deployment will do (an event's reconcile reads
        it fresh, and a queued one that both asked for reads it fresh).
        """
        key = (namespace, name)
        if not cached:
            self._from_cache.discard(key)
        if key in self._retrying and not urgent:
            return
        if key in self._queued:
            return  # the queued reconcile will see this event's state too
        self._queued.add(key)
        if cached:
            self._from_cache.add(key)
        async with self._locks.setdefault(key, asyncio.Lock()):
            slots = self._fair_slots()
            self.metrics.queued(slots.waiting + 1)
            async with slots.slot(namespace, urgent=urgent):
                self.metrics.queued(slots.waiting)
                self._queued.discard(key)
                await self._run(key)

    def _fair_slots(self) -> FairSlots:
        if self._slots is None:
            self._slots = FairSlots(self.workers)
        return self._slots

    def _view_holds_own_write(self, key: Key) -> bool:
        """Whether the watches' view of the deployment holds the operator's last status
        write to it (equal resourceVersions; no ordering of them is assumed)."""
        awaited = self._awaiting.get(key)
        if awaited is None:
            return True
        kept = None if self.cache is None else self.cache.get(DEPLOYMENT_KIND, *key)
        if kept is not None and (kept.get("metadata") or {}).get("resourceVersion") == awaited:
            del self._awaiting[key]
            return True
        return False

    async def _run(self, key: Key) -> None:
        report = self._reports.pop(key, None)
        cached = key in self._from_cache and self._view_holds_own_write(key)
        self._from_cache.discard(key)
        started = self.monotonic()
        try:
            result = await asyncio.to_thread(
                reconcile_once,
                self.api,
                *key,
                config=self.config,
                clock=self.clock,
                telemetry=report,
                scale=self._scale,
                cache=self.cache,
                cached_body=cached,
            )
            self.metrics.reconciled(Outcome.OK, self.monotonic() - started)
            self._failures.pop(key, None)
            if not cached:
                self._awaiting.pop(key, None)  # read fresh: newer than any earlier write
            if result.status_version is not None:
                self._awaiting[key] = result.status_version
            return
        except k8s.RetryLater as err:
            self.metrics.reconciled(Outcome.RETRY, self.monotonic() - started)
            log.info("%s/%s: stale view (%s); deciding again", *key, err)
            delay = 0.5
        except k8s.ChildrenRefused as err:
            self.metrics.reconciled(Outcome.ERROR, self.monotonic() - started)
            delay = self._backoff(key)
            log.warning("%s/%s: refused: %s; retrying in %.0fs", *key, err, delay)
        except k8s.API_ERRORS as err:
            self.metrics.reconciled(Outcome.ERROR, self.monotonic() - started)
            # never sooner than the server asked (a 429's retryAfterSeconds)
            delay = max(self._backoff(key), getattr(err, "retry_after", None) or 0.0)
            log.warning("%s/%s: reconcile failed: %s; retrying in %.0fs", *key, err, delay)
        except Exception:
            # A bug, or a failure no one listed (a truncated body, a decode error): kopf's
            # event handlers would drop it (review H1), so it is retried here, backing off.
            self.metrics.reconciled(Outcome.ERROR, self.monotonic() - started)
            delay = self._backoff(key)
            log.exception("%s/%s: reconcile raised; retrying in %.0fs", *key, delay)
        if report is not None:
            self._reports.setdefault(key, report)  # the retry still has this interval
        # a failed reconcile may have written the status (refused children go first):
        # its version is unknown, so the next reconcile reads the deployment fresh
        self._awaiting[key] = ""
        self._retry_later(key, delay)

    def _backoff(self, key: Key) -> float:
        """retry_seconds doubled per consecutive failure, at most retry_max_seconds, with
        up to 10% jitter so that a fleet's retries after an outage do not arrive together
        (review M10: a fixed 5 s forever)."""
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        base = min(self.retry_max_seconds, self.retry_seconds * 2 ** (failures - 1))
        return float(base * (1.0 + 0.1 * random.random()))

    def _retry_later(self, key: Key, delay: float) -> None:
        if key in self._retrying:
            return
        self._retrying.add(key)

        async def again() -> None:
            await asyncio.sleep(delay)
            self._retrying.discard(key)
            await self.reconcile(*key)

        asyncio.get_running_loop().create_task(again())

    async def reconcile_namespace(self, namespace: str | None, *, cached: bool = False) -> None:
        """Every deployment of a namespace (None: of every watched namespace); ``cached``:
        as ``reconcile`` (the resync, right after re-listing the watched kinds; a node
        sweep, which changed nothing of the deployments themselves).

        A list that fails is tried again with the same backoff as a reconcile
        (its key: the scope), not dropped: a node sweep or a profile's fan-out
        that met an outage would otherwise never happen (review H1).
        """
        scopes: tuple[str | None, ...] = (namespace,) if namespace else (self.namespaces or (None,))
        for scope in scopes:
            key: Key = ("*fan-out*", scope or "")
            try:
                found = await asyncio.to_thread(self._deployments, scope)
            except Exception as err:  # any failure is retried, none dropped
                delay = self._backoff(key)
                log.warning(
                    "listing deployments in %s failed: %s; again in %.0fs",
                    scope or "all namespaces",
                    err,
                    delay,
                )
                self._fan_out_later(scope, delay)
                continue
            self._failures.pop(key, None)
            for found_key in found:
                await self.reconcile(*found_key, cached=cached)

    def _deployments(self, scope: str | None) -> list[Key]:
        """The deployments of a namespace (None: all), from the watches' view when it has
        them (the resync re-lists it first), else listed."""
        if self.cache is None or DEPLOYMENT_KIND not in self.cache.kinds:
            return k8s.list_deployments(self.api, scope)
        items = self.cache.items_or_list(self.api, DEPLOYMENT_KIND, scope)
        return sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in items)

    def _fan_out_later(self, scope: str | None, delay: float) -> None:
        async def again() -> None:
            await asyncio.sleep(delay)
            await self.reconcile_namespace(scope)

        asyncio.get_running_loop().create_task(again())

    async def resync(self, every: float) -> None:
        """Reconcile every deployment each ``every`` seconds, for as long as the operator runs.

        Reconciles with nothing to change write nothing, so a resync costs reads only.
        """
        while True:
            await asyncio.sleep(every)
            await self.refresh_cache()
            await self.reconcile_namespace(None, cached=True)

    async def refresh_cache(self) -> None:
        """Re-list the watched kinds: a watch that missed an event is repaired once per resync
        for a request per kind, where the reconciles used to list them each."""
        if self.cache is None:
            return
        try:
            await asyncio.to_thread(self.cache.refresh_all, self.api)
        except Exception as err:  # the kept view stays; the next resync tries again
            log.warning("re-listing the watched objects failed: %s", err)

    def sweep_soon(self, delay: float = 1.0) -> None:
        """Reconcile every deployment once, shortly: a burst of node events makes one sweep."""
        if self._sweep_pending:
            return
        self._sweep_pending = True

        async def sweep() -> None:
            await asyncio.sleep(delay)
            self._sweep_pending = False
            await self.reconcile_namespace(None, cached=True)

        asyncio.get_running_loop().create_task(sweep())

    def _selector_keys(self) -> frozenset[str] | None:
        kept = None if self.cache is None else self.cache.items(DEPLOYMENT_KIND)
        if kept is None:
            return None
        return selector_keys((item.get("spec") or {}) for item in kept)

    def spec_changed(self, key: Key, generation: object) -> bool:
        """Whether ``generation`` is new for this deployment (its spec changed since seen)."""
        changed = self._generations.get(key) != generation
        self._generations[key] = generation
        return changed

    def forget(self, namespace: str, name: str) -> None:
        """A deleted deployment: nothing of it awaits the watches any more."""
        self._awaiting.pop((namespace, name), None)
        self._from_cache.discard((namespace, name))

    def node_changed(self, name: str, body: dict[str, Any] | None) -> bool:
        """Whether what discovery reads from this node changed since last seen: its GPUs,
        and the labels the deployments' node selectors name (all of them without a view
        of the deployments).

        The node's last state is kept whole (slimmed) and both states are read with
        today's selector keys: a signature kept from the keys of its time made every
        node's next heartbeat a change once a deployment named a new key, about a sweep
        a second for the next heartbeat period at 2,000 nodes (the fleet bench).
        """
        new = None if body is None else slim("Node", body)
        seen, old = name in self._nodes, self._nodes.get(name)
        self._nodes[name] = new
        if not seen or old is None or new is None:
            return not seen or old is not new
        keys = self._selector_keys()
        return bool(node_signature(old, keys) != node_signature(new, keys))
