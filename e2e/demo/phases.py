"""The demo's traffic phases and what each must show of the live floor. Pure.

Chat, then random text, then chat again: random text collapses acceptance,
the add-on drops K, the operator's live floor sees R (throughput over plain
decoding's) stay below 1 and rolls each pool to plain decoding with one
canary replica speculating; chat brings the canary's R above 1 and the pool
speculates again. A phase that waits for a floor state runs its load in
chunks until every pool is in that state with its rollout done (or its cap),
and ``verdicts`` says per pool when that happened, in telemetry windows.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Phase:
    """One load: ``workload`` for at least ``seconds``; with ``until`` (a live-floor state),
    on until every pool is in it and serving (or ``cap_seconds``)."""

    workload: str
    seconds: float
    until: str | None = None
    cap_seconds: float = 0.0

    def describe(self) -> str:
        if self.until is None:
            return f"{self.workload} prompts for {self.seconds:.0f} s"
        return (
            f"{self.workload} prompts until every pool runs {self.until} "
            f"(at most {self.cap_seconds:.0f} s)"
        )


PHASES = (
    Phase("chat", 45),
    Phase("random", 30, until="plain", cap_seconds=120),
    Phase("chat", 30, until="speculating", cap_seconds=120),
)
"""The live floor needs three losing windows and a streak that outlasts a restart's cost
over the loss (the demo's emulated pods restart in about a second), then the surged
rollout: about 50 s of 10-s windows after the shift. Coming back needs three winning
canary windows. A pool whose loss stays within the floor's margin keeps speculating: the
random phase then runs to its cap (12 windows) and says so."""


@dataclass(frozen=True)
class PoolFloorNow:
    """One pool as the live floor left it: its state, whether its rollout is done, R."""

    gpu: str
    state: str | None
    settled: bool
    """The pool's Deployment rolled out (status ``state`` Ready): it serves in this mode."""
    since: datetime.datetime | None
    ratio: tuple[float, float, float] | None
    canary_judged: bool = False
    """In plain decoding: R is the canary's (a canary window judged), not the pool's last."""


def pools_now(sdep: Obj) -> list[PoolFloorNow]:
    """Each pool's live-floor state from a SpeculativeDeployment's status."""
    found = []
    for pool in (sdep.get("status") or {}).get("pools") or ():
        floor = pool.get("floor") or {}
        bounds = tuple(floor.get(k) for k in ("ratio", "ratioLow", "ratioHigh"))
        since = floor.get("since")
        found.append(
            PoolFloorNow(
                gpu=str(pool.get("gpuType") or "-"),
                state=floor.get("state"),
                settled=pool.get("state") == "Ready",
                since=datetime.datetime.fromisoformat(since) if since else None,
                ratio=bounds if None not in bounds else None,  # type: ignore[arg-type]
                canary_judged=bool(floor.get("canaryAt")),
            )
        )
    return found


def reached(pools: Sequence[PoolFloorNow], state: str) -> bool:
    """Every pool in ``state`` with its rollout done (no pools: not reached)."""
    return bool(pools) and all(p.state == state and p.settled for p in pools)


@dataclass(frozen=True)
class Verdict:
    """What one phase showed for one pool."""

    gpu: str
    state: str | None
    reached: bool
    decided_s: float | None
    """Seconds from the phase's start to the floor's state change (``floor.since``)."""
    serving_s: float | None
    """Seconds from the phase's start to the first look that found the pool in the state
    with its rollout done (the demo looks every few seconds)."""
    interval_s: float
    ratio: tuple[float, float, float] | None
    canary_judged: bool = False

    def line(self) -> str:
        r = "R -" if self.ratio is None else "R {:.3f} [{:.3f}, {:.3f}]".format(*self.ratio)
        if not self.reached:
            return (
                f"{self.gpu}: {self.state or 'unjudged'} at the phase's end, {r} (the floor "
                "acts once R's upper bound stays below 1 - margin)"
            )
        if self.decided_s is None or self.decided_s < 0:
            return f"{self.gpu}: {self.state} throughout, {r}"
        windows = self.decided_s / self.interval_s
        decided = f" decided at {self.decided_s:.0f} s ({windows:.1f} telemetry windows),"
        serving = "" if self.serving_s is None else f" serving so at {self.serving_s:.0f} s;"
        if self.state == "plain":
            whose = "the canary's" if self.canary_judged else "the pool's last"
            how = f"its replicas decode plainly (1.00x by construction); {whose}"
        else:
            how = "its replicas speculate again, the canary gone; the pool's"
        return f"{self.gpu}: {self.state}{decided}{serving} {how} {r}"


def verdicts(
    pools: Sequence[PoolFloorNow],
    phase: Phase,
    started: datetime.datetime,
    first_seen: Mapping[str, float],
    interval_s: float,
) -> list[Verdict]:
    """Per pool: whether it reached the phase's state, when the floor decided it and when
    the demo first saw it serving so (``first_seen``: seconds after ``started``, by GPU)."""
    out = []
    for pool in pools:
        ok = phase.until is not None and pool.state == phase.until and pool.settled
        decided = (pool.since - started).total_seconds() if ok and pool.since else None
        out.append(
            Verdict(
                gpu=pool.gpu,
                state=pool.state,
                reached=ok,
                decided_s=decided,
                serving_s=first_seen.get(pool.gpu) if ok else None,
                interval_s=interval_s,
                ratio=pool.ratio,
                canary_judged=pool.canary_judged,
            )
        )
    return out


def as_json(phase: Phase, found: Sequence[Verdict]) -> dict[str, Any]:
    """A phase's verdicts for ``demo-floor.json``."""
    return {
        "workload": phase.workload,
        "until": phase.until,
        "pools": [
            {
                "gpuType": v.gpu,
                "state": v.state,
                "reached": v.reached,
                "decidedAfterSeconds": v.decided_s,
                "servingAfterSeconds": v.serving_s,
                "telemetryIntervalSeconds": v.interval_s,
                "ratio": v.ratio,
            }
            for v in found
        ],
    }
