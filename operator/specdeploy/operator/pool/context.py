"""What every stage of one pool's decision reads, and the values the stages hand on. Pure.

``decision.decide`` builds one ``Context`` per deployment; ``pipeline``
passes it, with the pool, to each stage in turn. ``Memory`` is what the
operator remembers between reconciles (the telemetry loop's latest
interval, the autoscaler's state, its monotonic clock): it travels beside
``Observed``, which holds only what the API server says, so neither has to
be patched into the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specdeploy.operator.api import Phase, PoolStatus, SpeculativeDeploymentSpec
from specdeploy.operator.builders.common import Manifest, Parent
from specdeploy.operator.config import Config
from specdeploy.operator.observed import Observed
from specdeploy.operator.pool.autoscale import ScaleState
from specdeploy.operator.telemetry.window import PoolWindow, TelemetryReport
from specdeploy.runtime.floor import FloorVerdict


class Profiling(StrEnum):
    """Where a pool stands with its profile."""

    NOT_NEEDED = "NotNeeded"
    READY = "Ready"
    RUNNING = "Running"
    FAILED = "Failed"
    MISSING = "Missing"


@dataclass(frozen=True)
class PoolOutcome:
    """What the decision found for one pool."""

    status: PoolStatus
    profiling: Profiling
    verdict: FloorVerdict | None = None
    """Against plain decoding, where the pool's profile has a baseline."""


@dataclass(frozen=True)
class Memory:
    """What the reconciler keeps between reconciles of one deployment, handed to the next."""

    telemetry: TelemetryReport | None = None
    """The telemetry loop's latest interval for this deployment, when it just ran."""
    scale: Mapping[str, ScaleState] = field(default_factory=dict)
    """The autoscaler's state per pool (GPU type) after the previous decision."""
    monotonic: float = 0.0
    """The reconciler's monotonic clock now (the autoscaler's windows are measured on it)."""


NO_MEMORY = Memory()
"""A first reconcile, or one decided without the reconciler (the chaos oracle, tests)."""


@dataclass(frozen=True)
class Context:
    """What every pool of one deployment is decided from."""

    parent: Parent
    spec: SpeculativeDeploymentSpec
    observed: Observed
    config: Config
    memory: Memory = NO_MEMORY
    previous: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The pools' previous status by GPU type (their recorded live views)."""
    windows: Mapping[str, PoolWindow] = field(default_factory=dict)
    """This interval's usable telemetry windows by pool label (empty: none this time)."""
    now: str = ""
    """The reconcile's clock value (recorded in live views)."""


@dataclass(frozen=True)
class Waiting:
    """Why a pool has no usable table yet, and what it needs meanwhile (a Job and its RBAC)."""

    state: Phase
    message: str
    profiling: Profiling
    profile_ref: str
    job: str | None = None
    shared: tuple[Manifest, ...] = ()


__all__ = ["NO_MEMORY", "Context", "Memory", "PoolOutcome", "Profiling", "Waiting"]
