"""PURE How many replicas a pool wants: demand over the capacity its tables predict, held steady.

Why its own module: the replica count is a decision (like K), made from
numbers the telemetry loop reads, and it must not flap. Two steps:

* ``recommend``: the replicas that serve the demand, where demand is the
  pool's generation rate plus its queue drained within ``drain_s``, and one
  replica's capacity is ``runtime.capacity.replica_capacity`` (the tokens/s it
  serves at the largest batch that keeps the latency target, under its K
  table and the live acceptance), less a headroom share. Clamped to the
  pool's ``replicas.min``/``max`` and to the GPUs of its type that are free:
  a replica that cannot be scheduled helps nobody and would sit Pending.
* ``stabilize``: the HPA's rule for each direction over a window of recent
  recommendations (up to the lowest of the up window, down to the highest of
  the down window, so a dip shorter than the down window never shrinks the
  pool), plus a guard that allows at most one change of direction per down
  window: a reversal waits until ``down_window_s`` has passed since the last
  one, so a load that oscillates faster than the window holds the pool at the
  higher count instead of cycling pods (a pod start costs minutes of model
  loading on a GPU).

Nothing here does I/O; times are seconds on the caller's monotonic clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum


class Why(StrEnum):
    """What decided a recommendation (shown in the pool's status)."""

    DEMAND = "demand"
    MIN = "min"
    MAX = "max"
    GPUS = "gpus"
    UNATTAINABLE = "unattainable"
    """No batch size meets the latency target: more replicas would not help; hold."""


@dataclass(frozen=True)
class Demand:
    """What a pool is asked for, summed over its replicas."""

    generation_tokens_per_s: float
    """Output tokens per second served now (``rate(vllm:generation_tokens)``)."""
    waiting_requests: float = 0.0
    """Requests queued for a batch slot (``vllm:num_requests_waiting``)."""
    tokens_per_request: float = 0.0
    """Mean output tokens of a request, to price the queue in tokens."""

    def tokens_per_second(self, drain_s: float) -> float:
        """The rate that serves the current load and empties the queue within ``drain_s``."""
        if drain_s <= 0:
            raise ValueError(f"drain_s must be > 0, got {drain_s}")
        queued = max(self.waiting_requests, 0.0) * max(self.tokens_per_request, 0.0)
        return max(self.generation_tokens_per_s, 0.0) + queued / drain_s


@dataclass(frozen=True)
class Bounds:
    """Where the replica count may go: the spec's bounds and the cluster's free GPUs."""

    min: int
    max: int
    gpus_per_replica: int = 1
    free_gpus: int | None = None
    """GPUs of the pool's type not in use (by this pool or others); None: not known."""

    def __post_init__(self) -> None:
        if not 0 <= self.min <= self.max:
            raise ValueError(f"replicas need 0 <= min <= max, got {self.min}..{self.max}")
        if self.gpus_per_replica < 1:
            raise ValueError(f"gpus_per_replica must be >= 1, got {self.gpus_per_replica}")


@dataclass(frozen=True)
class Recommendation:
    replicas: int
    wanted: int
    """Before the bounds: what the demand alone asks for."""
    why: Why


def recommend(
    demand: Demand,
    capacity_tokens_per_s: float | None,
    *,
    current: int,
    bounds: Bounds,
    headroom: float = 0.2,
    drain_s: float = 30.0,
) -> Recommendation:
    """The replicas for ``demand`` at ``capacity_tokens_per_s`` each (None: target unattainable).

    ``headroom``: the share of each replica's capacity kept free for bursts
    (0.2 plans replicas at 80% of their capacity).
    """
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom}")
    ceiling = bounds.max
    if bounds.free_gpus is not None:
        ceiling = min(ceiling, current + max(bounds.free_gpus, 0) // bounds.gpus_per_replica)
    ceiling = max(ceiling, min(current, bounds.max))  # never shed running replicas for lack of GPUs
    if capacity_tokens_per_s is None or capacity_tokens_per_s <= 0:
        held = min(max(current, bounds.min), ceiling)
        return Recommendation(held, current, Why.UNATTAINABLE)
    wanted = math.ceil(demand.tokens_per_second(drain_s) / (capacity_tokens_per_s * (1 - headroom)))
    if wanted > ceiling:
        return Recommendation(ceiling, wanted, Why.MAX if ceiling == bounds.max else Why.GPUS)
    if wanted < bounds.min:
        return Recommendation(bounds.min, wanted, Why.MIN)
    return Recommendation(wanted, wanted, Why.DEMAND)


@dataclass(frozen=True)
class ScaleState:
    """A pool's replicas and the recent recommendations that decide the next count."""

    replicas: int
    recent: tuple[tuple[float, int], ...] = ()
    """(time, recommended replicas), oldest first, within the longer window."""
    direction: int = 0
    """+1 after a scale-up, -1 after a scale-down, 0 before any change."""
    reversed_at: float | None = None
    """When the direction last changed (the first change counts as one)."""
    changes: tuple[float, ...] = field(default=(), compare=False)
    """When the replica count changed, for status and the benchmark's timeline."""


def stabilize(
    state: ScaleState,
    now: float,
    recommended: int,
    *,
    up_window_s: float = 0.0,
    down_window_s: float = 300.0,
) -> ScaleState:
    """The next state after one recommendation at ``now``."""
    keep = max(up_window_s, down_window_s)
    earlier = [r for r in state.recent if now - r[0] < keep]
    recent = (*earlier, (now, recommended))
    # Each window holds the recommendations younger than it plus this one: a window of 0
    # is this recommendation alone (act at once), whatever else was recorded at this time.
    ups = [n for t, n in earlier if now - t < up_window_s] + [recommended]
    downs = [n for t, n in earlier if now - t < down_window_s] + [recommended]
    target = state.replicas
    if recommended > state.replicas:
        target = max(min(ups), state.replicas)
    elif recommended < state.replicas:
        target = min(max(downs), state.replicas)
    held = replace(state, recent=recent)
    if target == state.replicas:
        return held
    direction = 1 if target > state.replicas else -1
    reversing = direction != state.direction
    if (
        reversing
        and state.reversed_at is not None
        and state.direction != 0
        and now - state.reversed_at < down_window_s
    ):
        return held
    return ScaleState(
        replicas=target,
        recent=recent,
        direction=direction,
        reversed_at=now if reversing else state.reversed_at,
        changes=(*state.changes, now),
    )


__all__ = ["Bounds", "Demand", "Recommendation", "ScaleState", "Why", "recommend", "stabilize"]
