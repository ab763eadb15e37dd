"""Start the operator: credentials, the reconciler, the kopf handlers, kopf's loop."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import kopf

from specdeploy.operator import k8s
from specdeploy.operator.decide import Config
from specdeploy.operator.handlers import Reconciler, register

DEFAULT_RESYNC_SECONDS = 300.0


def run(
    *,
    namespaces: Sequence[str] = (),
    config: Config | None = None,
    resync_seconds: float = DEFAULT_RESYNC_SECONDS,
    liveness_endpoint: str | None = None,
) -> None:
    """Run until interrupted; watch ``namespaces`` (empty: the whole cluster)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    registry = kopf.OperatorRegistry()
    reconciler = Reconciler(
        api=k8s.Client(k8s.find_credentials()),
        config=config or Config(),
        namespaces=tuple(namespaces),
    )
    register(registry, reconciler, resync_seconds=resync_seconds)
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        liveness_endpoint=liveness_endpoint,
    )
