"""The live stage: telemetry's view of the pool, its schedule when one is in force, and
re-profiling on sustained cost drift.

The assessment (``telemetry.assess``) reads this interval's window, the
recorded view and the profile; its goodput grid is the pool's one live cost
model for this reconcile, handed on in ``ServedTable.goodput`` so that
scaling prices capacity with the same per-bucket step times the schedule was
chosen with. A pool without a profile (off, fixed) or fallen back to plain
decoding has no live view. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from specdeploy.operator.api import LiveSource
from specdeploy.operator.naming import deployment_name, label_value
from specdeploy.operator.observed import pods_allowed_k
from specdeploy.operator.pool.context import Context, Profiling
from specdeploy.operator.pool.jobs import reprofiling
from specdeploy.operator.pool.pools import Pool
from specdeploy.operator.pool.table import ServedTable
from specdeploy.operator.telemetry.assess import (
    Assessment,
    PoolInputs,
    assess_pool,
    profile_digest,
    read_live,
)
from specdeploy.runtime.ranges import Range


def allowed_k(ctx: Context, pool: Pool, base: tuple[Range, ...]) -> tuple[int, ...]:
    """The K the pool's pods run: their ``SPECDEPLOY_ALLOWED_K``, else the base table's and 0."""
    deployment = ctx.observed.child("Deployment", deployment_name(ctx.parent.name, pool.gpu_type))
    found = pods_allowed_k(deployment)
    return found if found is not None else tuple(sorted({0, *(r[2] for r in base)}))


def _assessed(ctx: Context, pool: Pool, served: ServedTable, base: tuple[Range, ...]) -> Assessment:
    assert served.profile is not None
    inputs = PoolInputs(
        profile=served.profile.spec,
        digest=profile_digest(served.profile),
        base=base,
        allowed_k=allowed_k(ctx, pool, base),
        previous=read_live((ctx.previous.get(pool.gpu_type) or {}).get("live")),
        window=ctx.windows.get(label_value(pool.gpu_type)),
        now=ctx.now,
    )
    return assess_pool(inputs, ctx.config.telemetry)


def with_live(ctx: Context, pool: Pool, served: ServedTable) -> ServedTable:
    """The table in force: the live schedule when telemetry put one in force, else the
    profile's; the pods keep the profile's as their base."""
    if served.profile is None or served.schedule is None:
        return served
    base = served.schedule
    found = _assessed(ctx, pool, served, base)
    live = found.view
    schedule = base
    if live is not None and live.source is LiveSource.LIVE and live.schedule_ranges:
        schedule = tuple((int(a), int(b), int(c)) for a, b, c in live.schedule_ranges)
    shared, profiling, message = served.shared, Profiling.READY, ""
    if live is not None and live.cost_drift:
        children, profiling, message = reprofiling(ctx, pool, live)
        shared = served.shared + children
    return replace(
        served,
        schedule=schedule,
        profiling=profiling,
        shared=shared,
        live=live,
        base=base,
        goodput=found.goodput,
        message=message,
        ratio=found.ratio,
    )


__all__ = ["allowed_k", "with_live"]
