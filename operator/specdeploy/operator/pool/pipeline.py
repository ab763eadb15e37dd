"""One pool's decision, in the order its stages run. Pure.

The only place that knows the order: each stage takes the previous stage's
value and returns the next, and none calls a later one (``.importlinter``'s
``pool-pipeline`` contract: a stage imports only earlier stages). A new
stage is one more line here.

profile state (``jobs``) -> table -> the profile's plain-decoding floor ->
live table -> the live floor (plain decoding on live evidence) -> scale ->
children -> outcome.
"""

from __future__ import annotations

from specdeploy.operator.pool import children, floor, live, live_floor, outcome, scaling, table
from specdeploy.operator.pool.context import Context, Waiting
from specdeploy.operator.pool.outcome import PoolPlan
from specdeploy.operator.pool.pools import Pool


def decide_pool(ctx: Context, pool: Pool) -> PoolPlan:
    """What one pool wants and what its status says."""
    problem = pool.placement_problem()
    if problem is not None:
        return outcome.failed(ctx, pool, problem)
    found = table.table_for(ctx, pool)
    if isinstance(found, Waiting):
        return outcome.waiting(ctx, pool, found)
    served = floor.with_floor(ctx, found)
    served = live.with_live(ctx, pool, served)
    served = live_floor.with_live_floor(ctx, pool, served)
    scale = scaling.scale_for(ctx, pool, served)
    kids = children.pool_children(ctx, pool, served, scale)
    return outcome.serving(ctx, pool, served, scale, kids)


__all__ = ["decide_pool"]
