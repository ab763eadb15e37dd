"""Start the operator: one client, the reconciler, the kopf handlers, kopf's loop.

The client is made once (``k8s.connect``) and is the one identity: our
reads and writes go through it, and kopf's watches log in with its
credentials (``register_login``). The reconciler and the telemetry loop
share one ``OperatorMetrics``, served on ``metrics_port`` (``metrics``), and
reach the client through ``MeteredApi``, which counts their writes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import kopf

from specdeploy.operator import k8s
from specdeploy.operator.decide import Config
from specdeploy.operator.handlers import Reconciler, register, register_login
from specdeploy.operator.metrics import DEFAULT_PORT, MeteredApi, OperatorMetrics
from specdeploy.operator.telemetry.loop import TelemetryLoop

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
) -> None:
    """Run until interrupted; watch ``namespaces`` (empty: the whole cluster).

    ``metrics_port``: where ``/metrics`` is served (0: nowhere).
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("specdeploy").setLevel(log_level.upper())
    client = k8s.connect(kubeconfig, context)
    metrics = serve_metrics(metrics_port, metrics_addr)
    api = MeteredApi(client, metrics)
    registry = kopf.OperatorRegistry()
    settings = prometheus_from_env(config or Config())
    reconciler = Reconciler(
        api=api,
        config=settings,
        namespaces=tuple(namespaces),
        metrics=metrics,
    )
    telemetry = TelemetryLoop(
        api=api,
        deliver=reconciler.deliver,
        default_url=settings.prometheus_url,
        settings=settings.telemetry,
        namespaces=tuple(namespaces),
        metrics=metrics,
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
