"""The scale stage: one pool's replica count from the capacity its table predicts and the
demand telemetry read. Pure.

Why its own stage: ``children`` builds a pool's children from a count and
must not know how the count came about, and the three ways of applying it
(``spec.autoscaling.mode``) share one computation:

* capacity (``capacity_of``): one replica's output tokens/s at the largest
  batch that keeps the TPOT target, on the goodput grid the live stage
  priced the schedule in force with (``ServedTable.goodput``: live
  acceptance and the per-bucket step-time scales, so one pool has one live
  cost model per reconcile), or the profile's own grid when there is no live
  view; plain decoding's step times for a pool that fell back to it.
  Policies ``off`` and ``fixed`` have no profile, so no capacity: their
  count is held, and the status says so;
* the recommendation (``autoscale.recommend``): demand over capacity less
  headroom, within ``replicas.min/max`` and the GPUs of the pool's type;
* who applies it: ``operator`` stabilises it (``autoscale.stabilize``, over
  the in-memory state the reconciler keeps between intervals) and writes the
  Deployment's ``replicas``; ``hpa`` and ``keda`` leave ``replicas`` out of
  what the operator applies and export the recommendation as
  ``specdeploy_operator_pool_wanted_replicas`` for their scaler (``builders.scaler``);
  ``none`` runs ``replicas.min``.

Level-triggered where it can be: without a new telemetry window, ``operator``
mode keeps the Deployment's current count (clamped to the bounds) instead of
deciding again, so a reconcile for any other reason never moves replicas.
After an operator restart the stabiliser starts from the current count, with
that count as its only recommendation: a scale-down then waits a whole down
window, as if the pool had just been sized (conservative, never a flap).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specdeploy.operator.api import (
    AutoscalingMode,
    AutoscalingSpec,
    PoolScaling,
    ScaleLimit,
)
from specdeploy.operator.naming import deployment_name, label_value
from specdeploy.operator.observed import current_replicas
from specdeploy.operator.pool.autoscale import Bounds, Demand, ScaleState, Why, recommend, stabilize
from specdeploy.operator.pool.context import Context
from specdeploy.operator.pool.pools import Pool
from specdeploy.operator.pool.table import ServedTable
from specdeploy.operator.telemetry.window import PoolWindow
from specdeploy.runtime.capacity import Capacity, plain_decoding_grid, replica_capacity
from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.live import live_goodput_grid
from specdeploy.runtime.profile import ProfileSpec
from specdeploy.runtime.ranges import Range
from specdeploy.runtime.schedule import cost_model, grid_rows

_LIMITS = {
    Why.DEMAND: ScaleLimit.DEMAND,
    Why.MIN: ScaleLimit.MIN,
    Why.MAX: ScaleLimit.MAX,
    Why.GPUS: ScaleLimit.GPUS,
    Why.UNATTAINABLE: ScaleLimit.NO_CAPACITY,
}


@dataclass(frozen=True)
class PoolScale:
    """What the pool's Deployment gets and what its status says."""

    replicas: int | None
    """``spec.replicas`` to apply; None: left out (a scaler owns the field)."""
    status: PoolScaling | None
    state: ScaleState | None = None
    """The stabiliser's state to keep for the next interval (``operator`` mode)."""


def capacity_of(
    profile: ProfileSpec | None,
    schedule: tuple[Range, ...] | None,
    goodput: FloatArray | None,
    *,
    tpot_target_s: float,
) -> Capacity | None:
    """One replica's capacity at the target, or None (no profile, or no batch meets it).

    ``goodput``: the grid the schedule was priced with (the live stage's); None: the
    profile's own acceptance and step times.
    """
    if profile is None:
        return None
    rows = grid_rows(profile)
    if schedule is None:  # plain decoding: the profile's baseline step times
        model = cost_model(profile)
        itl = [None] + [model.vanilla_itl_ms(bs, model.reference_context) for bs in range(1, rows)]
        return replica_capacity(
            plain_decoding_grid(itl), ((1, rows, 0),), tpot_target_s=tpot_target_s
        )
    if goodput is None:
        goodput = live_goodput_grid(profile, profile.acceptance.per_position)
    return replica_capacity(goodput, schedule, tpot_target_s=tpot_target_s)


def demand_of(window: PoolWindow) -> Demand | None:
    """The pool's demand from one window; None when vLLM's counters were not read."""
    if window.generation_tokens_per_second is None:
        return None
    rate = window.generation_tokens_per_second
    requests = window.requests_per_second
    per_request = rate / requests if requests else 0.0
    return Demand(rate, window.waiting_requests or 0.0, per_request)


def _bounds(pool: Pool, running: int | None = None) -> Bounds:
    """The pool's bounds; with ``running``, its free GPUs as far as this operator can tell:
    the type's total less this pool's own replicas (pods of other workloads are not
    listed; a replica they crowd out waits Pending)."""
    free = None
    if pool.nodes is not None and running is not None:
        free = max(pool.nodes.total_gpus - running * pool.gpus_per_replica, 0)
    return Bounds(pool.replicas, max(pool.max_replicas, pool.replicas), pool.gpus_per_replica, free)


def _round(value: float | None, digits: int = 2) -> float | None:
    """Two significant digits: status records a move, not every interval's noise."""
    if value is None:
        return None
    return float(f"{value:.{digits}g}")


def pool_scale(
    spec: AutoscalingSpec,
    pool: Pool,
    *,
    profile: ProfileSpec | None,
    schedule: tuple[Range, ...] | None,
    goodput: FloatArray | None,
    window: PoolWindow | None,
    deployment: Mapping[str, Any] | None,
    previous: PoolScaling | None,
    state: ScaleState | None,
    now: float,
) -> PoolScale:
    """The pool's count and status under ``spec`` (module docstring)."""
    if spec.mode is AutoscalingMode.NONE:
        return PoolScale(pool.replicas, None)
    bounds = _bounds(pool)
    current = current_replicas(deployment)
    running = min(max(current if current is not None else bounds.min, bounds.min), bounds.max)
    held = running if spec.mode is AutoscalingMode.OPERATOR else None
    assert spec.tpot_target_ms is not None  # validation requires it outside mode none
    capacity = capacity_of(profile, schedule, goodput, tpot_target_s=spec.tpot_target_ms / 1000.0)
    demand = None if window is None else demand_of(window)
    if demand is None:
        if previous is not None and previous.scaler is spec.mode:
            return PoolScale(held, previous, state)
        status = PoolScaling(
            scaler=spec.mode,
            limited_by=ScaleLimit.NO_TELEMETRY,
            **_capacity_fields(capacity),
        )
        return PoolScale(held, status, state)
    rec = recommend(
        demand,
        None if capacity is None else capacity.tokens_per_second,
        current=running,
        bounds=_bounds(pool, running),
        headroom=spec.headroom,
        drain_s=spec.queue_drain_seconds,
    )
    status = PoolScaling(
        scaler=spec.mode,
        wanted_replicas=rec.replicas,
        limited_by=_LIMITS[rec.why],
        demand_tokens_per_second=_round(demand.tokens_per_second(spec.queue_drain_seconds)),
        **_capacity_fields(capacity),
    )
    if spec.mode is not AutoscalingMode.OPERATOR:
        return PoolScale(None, status)
    before = state if state is not None else ScaleState(running, recent=((now, running),))
    if before.replicas != running:  # someone else moved it (a user's kubectl scale): start there
        before = ScaleState(running, recent=((now, running),))
    after = stabilize(
        before,
        now,
        rec.replicas,
        up_window_s=spec.scale_up_window_seconds,
        down_window_s=spec.scale_down_window_seconds,
    )
    return PoolScale(after.replicas, status, after)


def _capacity_fields(capacity: Capacity | None) -> dict[str, Any]:
    if capacity is None:
        return {}
    return {
        "capacity_tokens_per_second": _round(capacity.tokens_per_second, 3),
        "capacity_batch_size": capacity.batch_size,
        "capacity_k": capacity.k,
    }


def scale_for(ctx: Context, pool: Pool, served: ServedTable) -> PoolScale:
    """The pool's count under its spec, on the served table's own cost model."""
    previous = (ctx.previous.get(pool.gpu_type) or {}).get("autoscaling")
    try:
        recorded = PoolScaling.model_validate(previous) if previous else None
    except ValidationError:
        recorded = None  # an older operator's shape: decided afresh
    name = deployment_name(ctx.parent.name, pool.gpu_type)
    return pool_scale(
        ctx.spec.autoscaling,
        pool,
        profile=None if served.profile is None else served.profile.spec,
        schedule=served.schedule,
        goodput=served.goodput,
        window=ctx.windows.get(label_value(pool.gpu_type)),
        deployment=ctx.observed.child("Deployment", name),
        previous=recorded,
        state=ctx.memory.scale.get(pool.gpu_type),
        now=ctx.memory.monotonic,
    )


__all__ = ["PoolScale", "capacity_of", "demand_of", "pool_scale", "scale_for"]
