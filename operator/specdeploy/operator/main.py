"""Start the operator: one client, the leader election, the reconciler, kopf's loop.

The client is made once (``k8s.connect``) and is the one identity: our
reads and writes go through it, and kopf's watches log in with its
credentials (``register_login``). The reconciler and the telemetry loop
share one ``OperatorMetrics``, served on ``metrics_port`` (``metrics``), and
reach the client through ``MeteredApi``, which counts their writes.

With leader election (the default, ``leader``), ``/metrics`` and the
liveness endpoint answer from the start, but kopf (and with it the watches,
the reconciler and the telemetry loop) starts only once this process holds
the Lease; a leader that stops cleanly releases it after kopf has stopped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import kopf

from specdeploy.operator.clients import k8s
from specdeploy.operator.config import Config
from specdeploy.operator.reactor import leader, standby
from specdeploy.operator.reactor.handlers import register, register_login, watched_view
from specdeploy.operator.reactor.metrics import DEFAULT_PORT, MeteredApi, OperatorMetrics
from specdeploy.operator.reactor.reconciler import Reconciler
from specdeploy.operator.reactor.telemetry_loop import TelemetryLoop

DEFAULT_RESYNC_SECONDS = 300.0
DEFAULT_METRICS_ADDR = "0.0.0.0"
"""All interfaces: in a pod, Prometheus scrapes the pod's IP."""
PROMETHEUS_URL_ENV = "SPECDEPLOY_PROMETHEUS_URL"
"""The Prometheus telemetry reads when a spec names none (the local cluster sets it)."""


def prometheus_from_env(config: Config) -> Config:
    """``config`` with the environment's default Prometheus URL, unless it has one."""
    url = os.environ.get(PROMETHEUS_URL_ENV, "").strip()
    if config.prometheus_url is not None or not url:
        return config
    return replace(config, prometheus_url=url)


def serve_metrics(port: int, addr: str = DEFAULT_METRICS_ADDR) -> OperatorMetrics:
    """The operator's metrics, served on ``addr:port`` unless ``port`` is 0.

    A port that cannot be bound stops the start, naming the flag: an
    operator nobody can scrape would hide exactly the trouble it exists to show.
    """
    metrics = OperatorMetrics()
    if not port:
        return metrics
    try:
        metrics.serve(port, addr)
    except OSError as err:
        raise SystemExit(f"--metrics-port {port}: cannot serve on {addr}:{port}: {err}") from err
    logging.getLogger("specdeploy.operator").info("metrics on http://%s:%d/metrics", addr, port)
    return metrics


@dataclass(frozen=True)
class Election:
    """How this process elects its leader (``run(election=None)``: it acts alone)."""

    namespace: str | None = None
    """None: ``leader.lease_namespace`` (the one watched, the own, ``default``)."""
    name: str = leader.DEFAULT_ID
    timing: leader.Timing = field(default_factory=leader.Timing)
    identity: str | None = None
    """None: ``leader.default_identity()``."""


DEFAULT_ELECTION = Election()


def elector_for(
    client: k8s.Client, election: Election, watched: Sequence[str] = ()
) -> leader.LeaderElector:
    """The candidate this process is, over a Lease client of its own; bad names stop the start."""
    namespace = leader.lease_namespace(
        election.namespace, watched=watched, env=os.environ, client_namespace=client.namespace
    )
    if not leader.valid_namespace(namespace):
        raise SystemExit(f"--leader-election-namespace {namespace!r} is not a namespace name")
    if not leader.valid_lease_name(election.name):
        raise SystemExit(f"--leader-election-id {election.name!r} is not a valid Lease name")
    timeout = election.timing.renew_deadline / 2
    return leader.LeaderElector(
        leader.lease_client(client, timeout=timeout),
        namespace=namespace,
        name=election.name,
        identity=election.identity,
        timing=election.timing,
    )


def standby_probe(
    endpoint: str | None, elector: leader.LeaderElector
) -> AbstractContextManager[object]:
    """The liveness endpoint served while standing by (none when no endpoint is asked for)."""
    if not endpoint:
        return nullcontext()
    try:
        return standby.StandbyProbe(endpoint, elector)
    except (OSError, ValueError) as err:
        raise SystemExit(f"--liveness {endpoint}: cannot serve it: {err}") from err


def run(
    *,
    namespaces: Sequence[str] = (),
    config: Config | None = None,
    resync_seconds: float = DEFAULT_RESYNC_SECONDS,
    liveness_endpoint: str | None = None,
    metrics_port: int = DEFAULT_PORT,
    metrics_addr: str = DEFAULT_METRICS_ADDR,
    kubeconfig: Path | None = None,
    context: str | None = None,
    log_level: str = "info",
    election: Election | None = DEFAULT_ELECTION,
) -> None:
    """Run until interrupted; watch ``namespaces`` (empty: the whole cluster).

    ``metrics_port``: where ``/metrics`` is served (0: nowhere). ``election``:
    act only while holding its Lease (None: act at once, alone).
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("specdeploy").setLevel(log_level.upper())
    client = k8s.connect(kubeconfig, context)
    metrics = serve_metrics(metrics_port, metrics_addr)

    def operate() -> None:
        _operate(
            client,
            metrics,
            namespaces=namespaces,
            config=config,
            resync_seconds=resync_seconds,
            liveness_endpoint=liveness_endpoint,
        )

    if election is None:
        metrics.leading(True)
        operate()
        return
    elector = elector_for(client, election, namespaces)
    metrics.leading(False)
    with standby_probe(liveness_endpoint, elector):
        if not leader.wait_for_leadership(elector):
            return
    metrics.leading(True)
    try:
        with leader.Leadership(elector):
            operate()
    finally:
        # kopf has stopped writing: the successor may start now rather than in 15 s.
        metrics.leading(False)
        elector.release()


def _operate(
    client: k8s.Client,
    metrics: OperatorMetrics,
    *,
    namespaces: Sequence[str],
    config: Config | None,
    resync_seconds: float,
    liveness_endpoint: str | None,
) -> None:
    """The reconciler, the telemetry loop and kopf's handlers, run until kopf stops."""
    api = MeteredApi(client, metrics)
    registry = kopf.OperatorRegistry()
    settings = prometheus_from_env(config or Config())
    cache = watched_view(tuple(namespaces))
    reconciler = Reconciler(
        api=api,
        config=settings,
        namespaces=tuple(namespaces),
        metrics=metrics,
        cache=cache,
    )
    telemetry = TelemetryLoop(
        api=api,
        deliver=reconciler.deliver,
        default_url=settings.prometheus_url,
        settings=settings.telemetry,
        namespaces=tuple(namespaces),
        metrics=metrics,
        cache=cache,
    )
    register(registry, reconciler, resync_seconds=resync_seconds, telemetry=telemetry)
    register_login(registry, client.credentials)
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        liveness_endpoint=liveness_endpoint,
    )
