"""The table stage: the K schedule a pool's policy and profile give it, or why it waits.

Policies ``off`` and ``fixed`` need no profile. ``adaptive`` and ``table``
read the SpeculationProfile the pool's fingerprint names: a valid one is
reused (``profiling.mode: auto``; ``always`` only once this generation's
Job has written it), else the pool waits on its profiling Job
(``jobs``). The later stages (floor, live, scale) refine the
``ServedTable`` this stage returns; none of them reads a profile again. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.operator.api import FloorState, Phase, Policy, PoolFloor, PoolLive, ProfilingMode
from specdeploy.operator.builders.common import Manifest
from specdeploy.operator.builders.job import profiling_job
from specdeploy.operator.observed import JobPhase, ProfileView, read_profile
from specdeploy.operator.pool.context import Context, Profiling, Waiting
from specdeploy.operator.pool.jobs import current_attempt, job_waiting
from specdeploy.operator.pool.pools import Pool
from specdeploy.runtime.floor import FloorVerdict, LiveRatio
from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.ranges import Range, schedule_problems
from specdeploy.runtime.schedule import derive_schedule


@dataclass(frozen=True)
class ServedTable:
    """The K schedule a pool serves with (None: no speculation) and where it came from."""

    schedule: tuple[Range, ...] | None
    profile: SpeculationProfile | None
    profile_ref: str | None
    profiling: Profiling
    shared: tuple[Manifest, ...] = ()
    verdict: FloorVerdict | None = None
    """Against plain decoding (the floor stage); with ``schedule`` None and a losing
    verdict, the pool fell back to plain decoding."""
    live: PoolLive | None = None
    """Telemetry's view of the pool; with ``source: live`` its schedule is ``schedule``."""
    base: tuple[Range, ...] | None = None
    """The schedule the pods start with (the profile's), when ``schedule`` is a live one:
    the pod template keeps it, so a live table restarts nothing."""
    goodput: FloatArray | None = None
    """The live stage's cost model: goodput per (batch size, K) the schedule was priced
    with. Scaling prices capacity on this very grid (None: the profile's own)."""
    message: str = ""
    """Appended to the pool's message (re-profiling under way)."""
    ratio: LiveRatio | None = None
    """The live stage's R over plain decoding for this reconcile's window (None: no window)."""
    floor: PoolFloor | None = None
    """The live floor's state (``pool.live_floor``); with state plain, ``schedule`` is None."""
    canary: tuple[Range, ...] | None = None
    """With the live floor's state plain: the table the pool's one speculating replica (the
    canary, surged beside the plain ones) runs, so that live evidence can bring it back."""
    canary_base: tuple[Range, ...] | None = None
    """The canary's start-up table (the profile's) when ``canary`` is a live one."""

    @property
    def fell_back(self) -> bool:
        """Plain decoding by a floor: the profile's verdict, or the live floor's state."""
        if self.schedule is not None:
            return False
        live_plain = self.floor is not None and self.floor.state is FloorState.PLAIN
        return live_plain or (self.verdict is not None and self.verdict.loses)


def usable_schedule(
    ctx: Context, name: str, view: ProfileView
) -> tuple[tuple[Range, ...] | None, str]:
    """The profile's schedule if vLLM would accept it for this maxK, else why not."""
    if view.document is None:
        return None, f"SpeculationProfile {name} is invalid: " + "; ".join(view.problems)
    document = view.document
    claimed = document.spec.fingerprint.profile_name()
    if claimed != name:  # review M12: a profile stands only for the fingerprint it names
        return None, (
            f"SpeculationProfile {name} holds the fingerprint of {claimed} (edited by hand, or "
            "written by another tool): not used; delete it to profile again"
        )
    schedule = document.spec.schedule
    ranges = tuple(schedule) if schedule is not None else tuple(derive_schedule(document.spec))
    max_k = ctx.spec.speculation.max_k
    problems = list(schedule_problems(ranges, max_k=max_k))
    if problems:
        return (
            None,
            f"SpeculationProfile {name}: schedule unusable with maxK={max_k}: "
            + "; ".join(problems),
        )
    return ranges, ""


def table_for(ctx: Context, pool: Pool) -> ServedTable | Waiting:
    """The pool's table from its policy and profile, or why it has none yet."""
    speculation = ctx.spec.speculation
    if speculation.policy is Policy.OFF:
        return ServedTable(None, None, None, Profiling.NOT_NEEDED)
    if speculation.policy is Policy.FIXED:
        # One range from batch size 1: vLLM gives every larger batch the last K.
        fixed = ((1, 1, speculation.fixed_k or 0),)
        return ServedTable(fixed, None, None, Profiling.NOT_NEEDED)
    return _profiled(ctx, pool)


def _profiled(ctx: Context, pool: Pool) -> ServedTable | Waiting:
    """A policy that needs a profiled table (adaptive, table)."""
    spec = ctx.spec
    job, state, failed_before = current_attempt(ctx, pool)
    name = job.profile_name
    stored = ctx.observed.profiles.get(name)
    always = spec.profiling.mode is ProfilingMode.ALWAYS
    # mode always: a profile counts only once this generation's Job has written it.
    done = state is not None and state.phase is JobPhase.SUCCEEDED
    if stored is not None and (done or not always):
        view = read_profile(stored)
        schedule, why = usable_schedule(ctx, name, view)
        marker = (profiling_job(spec, job),) if always else ()
        if schedule is None:
            return Waiting(Phase.FAILED, why, Profiling.FAILED, name, shared=marker)
        return ServedTable(schedule, view.document, name, Profiling.READY, marker)
    if spec.profiling.mode is ProfilingMode.NEVER:
        message = f"no SpeculationProfile {name} and spec.profiling.mode is never"
        return Waiting(Phase.PENDING, message, Profiling.MISSING, name)
    return job_waiting(ctx, job, state, failed_before)


__all__ = ["ServedTable", "table_for", "usable_schedule"]
