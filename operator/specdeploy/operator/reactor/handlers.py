"""Thin kopf handlers: every watch event becomes "reconcile this deployment".

Only kopf *event* handlers are used: kopf then writes nothing of its own to
the objects (no finalizers, no progress annotations), so a reconcile with
nothing to change really writes nothing. Level-triggering comes from two
places: every event (of the deployment or of any child, profile or GPU node)
reconciles the deployments it may concern, and every ``resync_seconds`` a
resync lists the deployments and reconciles each, so a missed event (or a
hand edit of something no watch sees) costs at most one resync period. kopf
itself lists once and then re-watches from the last resourceVersion: its
watches never replay (review H1), hence the resync of our own.

The children's watches are narrowed on the server by the managed-by label
(``settings.watching.label_selectors``): the operator streams its own
objects, not every Deployment, ConfigMap and Job of the cluster (review M2).

Reconciles of one deployment never overlap (a lock per deployment) and
coalesce: events that arrive while one waits are answered by that one. At
most ``workers`` run at once, woken fairly (``work_queue``: spec changes
first, then namespace by namespace), and they read the watched kinds from
the watches' cache (``watch_cache``), not by listing them. Any
failure, listed or not, retries after a per-deployment backoff (events wait
for it; a spec change does not); a failed
fan-out (a namespace's or the cluster's list of deployments) is retried the
same way rather than dropped.

kopf logs in with our client's credentials (``register_login``), not with
a loader of its own, so its watches and our writes are the same identity.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from specdeploy.operator.api import (
    DEPLOYMENT_KIND,
    DEPLOYMENT_PLURAL,
    GROUP,
    PROFILE_KIND,
    PROFILE_PLURAL,
    VERSION,
)
from specdeploy.operator.builders.common import MANAGED_BY
from specdeploy.operator.clients import k8s
from specdeploy.operator.clients.watch_cache import WatchCache, slim
from specdeploy.operator.config import DEFAULT_CONFIG, Clock, Config, utc_now
from specdeploy.operator.discovery import node_signature, selector_keys
from specdeploy.operator.observed import READ_ONLY_WATCHED_KINDS, WATCHED_KINDS
from specdeploy.operator.reactor.metrics import OperatorMetrics, Outcome
from specdeploy.operator.reactor.reconcile import ScaleMemory, reconcile_once
from specdeploy.operator.reactor.telemetry_loop import TelemetryLoop
from specdeploy.operator.reactor.work_queue import FairSlots
from specdeploy.operator.telemetry.window import TelemetryReport
from specdeploy.runtime.kube import paths

Key = tuple[str, str]
log = logging.getLogger("specdeploy.operator")
MANAGED = {MANAGED_BY[0]: MANAGED_BY[1]}


def _resource(kind: str) -> tuple[str, str, str]:
    group, _, version = paths.kind_of(kind).api_version.rpartition("/")
    return group, version, paths.kind_of(kind).plural


CHILD_RESOURCES = tuple(_resource(kind) for kind in WATCHED_KINDS)
"""(group, version, plural) of each watched child kind, as kopf names resources."""
SCALER_RESOURCES = tuple(_resource(kind) for kind in READ_ONLY_WATCHED_KINDS)
MANAGED_SELECTOR = "=".join(MANAGED_BY)
"""The server-side label selector of the children's watches."""


def watched_view(namespaces: tuple[str, ...] = ()) -> WatchCache:
    """The cache of what the handlers below watch: children (by the managed-by label),
    profiles, deployments and nodes (all of them)."""
    selectors: dict[str, str | None] = dict.fromkeys(
        (*WATCHED_KINDS, *READ_ONLY_WATCHED_KINDS), MANAGED_SELECTOR
    )
    selectors[PROFILE_KIND] = None
    selectors[DEPLOYMENT_KIND] = None  # the telemetry loop's every-tick list of deployments
    selectors["Node"] = None
    return WatchCache(selectors, namespaces=namespaces)


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


def connection_info(credentials: k8s.Credentials) -> kopf.ConnectionInfo:
    """Our client's identity in kopf's terms: the watches and our writes are one identity."""
    return kopf.ConnectionInfo(
        server=credentials.server,
        ca_path=credentials.ca_file,
        insecure=credentials.insecure,
        scheme=credentials.scheme,
        token=credentials.token,
        certificate_path=credentials.cert_file,
        private_key_path=credentials.key_file,
        default_namespace=credentials.namespace,
        proxy_url=credentials.proxy,
    )


def register_login(
    registry: kopf.OperatorRegistry, credentials: Callable[[], k8s.Credentials]
) -> None:
    """Make kopf log in as ``credentials()`` says, asked again whenever kopf re-authenticates.

    kopf asks again after a 401, and ``Client.credentials`` re-reads a
    rotated token and renews an expired exec or OIDC one, so kopf follows.
    """

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(credentials())


def register_telemetry(registry: kopf.OperatorRegistry, loop: TelemetryLoop) -> None:
    """Run the telemetry loop beside kopf's watches, stopped when kopf stops."""
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry, id="telemetry-start")
    async def start_telemetry(**_: Any) -> None:
        tasks.append(asyncio.get_running_loop().create_task(loop.run()))

    @kopf.on.cleanup(registry=registry, id="telemetry-stop")
    async def stop_telemetry(**_: Any) -> None:
        for task in tasks:
            task.cancel()


def _on(registry: kopf.OperatorRegistry, *selector: str, **filters: Any) -> Callable[[Any], Any]:
    return kopf.on.event(*selector, registry=registry, **filters)


def register(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    *,
    resync_seconds: float,
    telemetry: TelemetryLoop | None = None,
) -> None:
    """Attach the handlers to ``registry`` (a fresh one in tests); start ``telemetry`` with kopf."""
    if telemetry is not None:
        register_telemetry(registry, telemetry)

    resyncs: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.standalone = True
        settings.posting.enabled = False  # Events are ours, written on transitions only
        settings.watching.server_timeout = int(resync_seconds)  # the API wants an integer
        settings.watching.client_timeout = int(resync_seconds) + 30
        for group, version, plural in (*CHILD_RESOURCES, *SCALER_RESOURCES):
            settings.watching.label_selectors[group, version, plural] = MANAGED_SELECTOR
        # Named namespaces need no scanning of namespaces and CRDs (which a Role cannot
        # grant): the namespaced mode serves the resources the API has at start.
        settings.scanning.disabled = bool(reconciler.namespaces)
        resyncs.append(asyncio.get_running_loop().create_task(reconciler.resync(resync_seconds)))

    @kopf.on.cleanup(registry=registry, id="resync-stop")
    async def stop_resync(**_: Any) -> None:
        for task in resyncs:
            task.cancel()

    @_on(registry, GROUP, VERSION, DEPLOYMENT_PLURAL)
    async def deployment_event(
        type: str | None, namespace: str, name: str, body: dict[str, Any], **_: Any
    ) -> None:
        if reconciler.cache is not None:
            reconciler.cache.observe(DEPLOYMENT_KIND, dict(body), deleted=type == "DELETED")
        if type == "DELETED":
            reconciler.forget(namespace, name)
        else:  # owner references delete the children
            generation = (body.get("metadata") or {}).get("generation")
            await reconciler.reconcile(
                namespace, name, urgent=reconciler.spec_changed((namespace, name), generation)
            )

    for kind, (group, version, plural) in zip(WATCHED_KINDS, CHILD_RESOURCES, strict=True):

        @_on(
            registry, *filter(None, (group, version, plural)), labels=MANAGED, id=f"child-{plural}"
        )
        async def child_event(
            type: str | None, body: dict[str, Any], namespace: str, _kind: str = kind, **_: Any
        ) -> None:
            if reconciler.cache is not None:
                reconciler.cache.observe(_kind, dict(body), deleted=type == "DELETED")
            for owner in k8s.owners_of(body):
                await reconciler.reconcile(namespace, owner)

    generations: dict[tuple[str, str, str], object] = {}
    for kind, (group, version, plural) in zip(
        READ_ONLY_WATCHED_KINDS, SCALER_RESOURCES, strict=True
    ):

        @_on(registry, group, version, plural, labels=MANAGED, id=f"scaler-{plural}")
        async def scaler_event(
            type: str | None,
            body: dict[str, Any],
            namespace: str,
            name: str,
            _kind: str = kind,
            **_: Any,
        ) -> None:
            deleted = type == "DELETED"
            if reconciler.cache is not None:
                reconciler.cache.observe(_kind, dict(body), deleted=deleted)
            at = (_kind, namespace, name)
            generation = (body.get("metadata") or {}).get("generation")
            if deleted:
                generations.pop(at, None)
            elif generations.get(at, "unseen") == generation:
                return  # a status update (the HPA controller's sync): nothing to undo
            else:
                generations[at] = generation
            for owner in k8s.owners_of(body):
                await reconciler.reconcile(namespace, owner)

    @_on(registry, GROUP, VERSION, PROFILE_PLURAL)
    async def profile_event(
        type: str | None, namespace: str, body: dict[str, Any], **_: Any
    ) -> None:
        if reconciler.cache is not None:
            reconciler.cache.observe(PROFILE_KIND, dict(body), deleted=type == "DELETED")
        await reconciler.reconcile_namespace(namespace)

    @_on(registry, "v1", "nodes")
    async def node_event(type: str | None, name: str, body: dict[str, Any], **_: Any) -> None:
        if reconciler.cache is not None:
            reconciler.cache.observe("Node", dict(body), deleted=type == "DELETED")
        if reconciler.node_changed(name, None if type == "DELETED" else dict(body)):
            reconciler.sweep_soon()
