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

Which reconcile runs when, one at a time per deployment and with backoff,
is the ``Reconciler``'s (``reconciler``); reconciles read the watched kinds
from the watches' cache (``clients.watch_cache``), not by listing them.

kopf logs in with our client's credentials (``register_login``), not with
a loader of its own, so its watches and our writes are the same identity.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
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
from specdeploy.operator.clients.watch_cache import WatchCache
from specdeploy.operator.observed import READ_ONLY_WATCHED_KINDS, WATCHED_KINDS
from specdeploy.operator.reactor.reconciler import Reconciler
from specdeploy.operator.reactor.telemetry_loop import TelemetryLoop
from specdeploy.runtime.kube import paths

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
