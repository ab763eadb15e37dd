"""Start the operator: one client, the reconciler, the kopf handlers, kopf's loop.

The client is made once (``k8s.connect``) and is the one identity: our
reads and writes go through it, and kopf's watches log in with its
credentials (``register_login``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import kopf

from specdeploy.operator import k8s
from specdeploy.operator.decide import Config
from specdeploy.operator.handlers import Reconciler, register, register_login

DEFAULT_RESYNC_SECONDS = 300.0


def run(
    *,
    namespaces: Sequence[str] = (),
    config: Config | None = None,
    resync_seconds: float = DEFAULT_RESYNC_SECONDS,
    liveness_endpoint: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    log_level: str = "info",
) -> None:
    """Run until interrupted; watch ``namespaces`` (empty: the whole cluster)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("specdeploy").setLevel(log_level.upper())
    client = k8s.connect(kubeconfig, context)
    registry = kopf.OperatorRegistry()
    reconciler = Reconciler(
        api=client,
        config=config or Config(),
        namespaces=tuple(namespaces),
    )
    register(registry, reconciler, resync_seconds=resync_seconds)
    register_login(registry, client.credentials)
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        liveness_endpoint=liveness_endpoint,
    )
