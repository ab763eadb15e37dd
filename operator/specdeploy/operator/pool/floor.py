"""The plain-decoding floor stage: keep speculating only where the profile beats not doing it.

The verdict (``runtime.floor.judge``) is taken at the batch sizes the spec
profiles; with ``spec.speculation.fallback: vanilla`` a losing profile
turns speculation off for the pool (no schedule: its Deployment runs
without ``--speculative-config``). Policies without a profile (off, fixed)
pass through unjudged. The live floor (``live_floor``, after the live
stage) judges the traffic once it flows. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from specdeploy.operator.api import Fallback
from specdeploy.operator.pool.context import Context
from specdeploy.operator.pool.table import ServedTable
from specdeploy.runtime.floor import judge


def with_floor(ctx: Context, served: ServedTable) -> ServedTable:
    """The table with its verdict against plain decoding, and no schedule if it loses."""
    if served.profile is None:
        return served
    verdict = judge(served.profile.spec, ctx.spec.profiling.batch_sizes)
    if verdict.loses and ctx.spec.speculation.fallback is Fallback.VANILLA:
        return replace(served, schedule=None, verdict=verdict)
    return replace(served, verdict=verdict)


__all__ = ["with_floor"]
