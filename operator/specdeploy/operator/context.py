"""What one pool's decision reads and returns, and the helpers profiling and serving share.

``decide`` builds a ``Context`` per deployment and asks, per pool, either
``profiling.profiled_pool`` (a policy that needs a measured table) or
``serving.serve`` (a table in hand); both answer a ``PoolPlan``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specdeploy.operator.api import Phase, PoolStatus, SpeculativeDeploymentSpec
from specdeploy.operator.autoscale import ScaleState
from specdeploy.operator.builders.common import Manifest, Parent
from specdeploy.operator.builders.job import DEFAULT_IMAGE
from specdeploy.operator.manifests import Ref, ref_of
from specdeploy.operator.naming import deployment_name, table_configmap_name
from specdeploy.operator.observed import Observed, owner_uids
from specdeploy.operator.pools import Pool
from specdeploy.operator.status import PoolOutcome
from specdeploy.operator.telemetry.settings import DEFAULT_SETTINGS, TelemetrySettings
from specdeploy.operator.telemetry.window import PoolWindow


@dataclass(frozen=True)
class Config:
    """Operator-wide settings that are not part of any spec."""

    profiler_image: str = DEFAULT_IMAGE
    prometheus_url: str | None = None
    """Where telemetry is read when a spec names no Prometheus (``SPECDEPLOY_PROMETHEUS_URL``)."""
    telemetry: TelemetrySettings = DEFAULT_SETTINGS


DEFAULT_CONFIG = Config()


@dataclass(frozen=True)
class PoolPlan:
    """One pool's part of the decision: its outcome and the children it wants."""

    outcome: PoolOutcome
    owned: tuple[Manifest, ...] = ()
    keep: frozenset[Ref] = frozenset()
    shared: tuple[Manifest, ...] = ()
    scale: ScaleState | None = None
    """The autoscaler's state for the next interval (``operator`` mode), kept in memory."""


@dataclass(frozen=True)
class Context:
    """What every pool of one deployment is decided from."""

    parent: Parent
    spec: SpeculativeDeploymentSpec
    observed: Observed
    config: Config
    previous: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The pools' previous status by GPU type (their recorded live views)."""
    windows: Mapping[str, PoolWindow] = field(default_factory=dict)
    """This interval's usable telemetry windows by pool label (empty: none this time)."""
    now: str = ""
    """The reconcile's clock value (recorded in live views)."""


def pool_status(pool: Pool, state: Phase, message: str, **extra: Any) -> PoolStatus:
    return PoolStatus(gpu_type=pool.gpu_type, state=state, message=message, **extra)


def conflict(ctx: Context, manifests: tuple[Manifest, ...]) -> str | None:
    """Why a wanted child cannot be written: its name is taken by an object not ours."""
    for manifest in manifests:
        kind, name = ref_of(manifest)
        existing = ctx.observed.child(kind, name)
        if existing is not None and ctx.parent.uid not in owner_uids(existing):
            return f"{kind} {name} exists and does not belong to this SpeculativeDeployment"
    return None


def keep_previous(ctx: Context, pool: Pool) -> frozenset[Ref]:
    """The pool's current ConfigMap and Deployment, if any: they serve while we profile."""
    parent = ctx.parent
    refs = {
        ("Deployment", deployment_name(parent.name, pool.gpu_type)),
        ("ConfigMap", table_configmap_name(parent.name, pool.gpu_type)),
    }
    return frozenset(r for r in refs if ctx.observed.child(*r) is not None)
