"""How many tokens per second one replica serves within a latency target, from its tables.

Why this exists: a replica's capacity is not a constant. Speculative decoding
makes each sequence faster at small batches and the batch slower at large
ones, and the K the pod runs at each batch size (its table) decides where the
two cross. Autoscalers that count requests or GPU utilisation cannot see
that; the profile's cost model and the live acceptance can. Capacity here is
the largest total output rate a replica reaches while every sequence still
gets its tokens as fast as the target asks:

    per-sequence rate at batch size b:   g(b) = goodput[b, K(b)]   (tokens/s)
    per-token latency (TPOT):            1 / g(b)
    replica rate:                        b * g(b)
    capacity = max over b <= max_batch_size with 1 / g(b) <= tpot_target of b * g(b)

``goodput`` is a grid indexed [batch size, K] (``schedule.goodput_grid`` for
the profile's acceptance, ``live.live_goodput_grid`` for the live one, a
plain-decoding column for a pool that runs without speculation) and ``K(b)``
comes from the table in force (``ranges.k_at``). The grid only prices the
batch sizes the profile measured up to its largest: capacity beyond it is
not extrapolated, and the result says when that bound, not the latency
target, is what limits it.

Pure (numpy only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.ranges import k_at


class Limit(StrEnum):
    """What stops a replica from taking a larger batch."""

    LATENCY = "latency"
    """A larger batch would make the per-token latency exceed the target."""
    BATCH = "batch"
    """The largest batch the pod runs (``max_num_seqs``) or the profile prices."""


@dataclass(frozen=True)
class Capacity:
    """One replica's operating point: the batch it can carry and what it serves there."""

    batch_size: int
    k: int
    tokens_per_second: float
    """Output tokens per second summed over the batch (the replica's capacity)."""
    tpot_seconds: float
    """Per-token latency each sequence sees there."""
    limited_by: Limit


def replica_capacity(
    goodput: FloatArray,
    schedule: Sequence[Sequence[int]],
    *,
    tpot_target_s: float | None,
    max_batch_size: int | None = None,
) -> Capacity | None:
    """The replica's capacity under ``schedule``, or None when no batch meets the target.

    ``tpot_target_s`` None: no latency target (the capacity at the largest
    priced batch). ``max_batch_size``: the pod's ``max_num_seqs``, when it is
    below what the profile prices. A batch size the grid cannot price at the
    table's K (NaN) is never chosen.
    """
    if tpot_target_s is not None and tpot_target_s <= 0:
        raise ValueError(f"tpot_target_s must be > 0, got {tpot_target_s}")
    rows = goodput.shape[0] - 1
    top = rows if max_batch_size is None else min(rows, max_batch_size)
    best: Capacity | None = None
    largest_too_slow = 0
    for bs in range(1, top + 1):
        k = min(k_at(schedule, bs), goodput.shape[1] - 1)
        per_sequence = float(goodput[bs, k])
        if not np.isfinite(per_sequence) or per_sequence <= 0:
            continue
        tpot = 1.0 / per_sequence
        if tpot_target_s is not None and tpot > tpot_target_s:
            largest_too_slow = bs
            continue
        rate = bs * per_sequence
        if best is None or rate > best.tokens_per_second:
            best = Capacity(bs, k, rate, tpot, Limit.BATCH)
    if best is None or largest_too_slow < best.batch_size:
        return best
    # A larger batch would break the target: latency, not batch size, is the bound.
    return replace(best, limited_by=Limit.LATENCY)


def plain_decoding_grid(vanilla_itl_ms: Sequence[float | None]) -> FloatArray:
    """A one-column goodput grid (K = 0 only) from plain decoding's step time per batch size.

    ``vanilla_itl_ms[b]`` is the step time at batch size b (index 0 unused;
    None where the profile has no baseline). A pool the operator serves
    without speculation (the plain-decoding floor) is sized from this grid
    with the schedule ``[(1, b_max, 0)]``.
    """
    grid = np.full((len(vanilla_itl_ms), 1), np.nan)
    for bs, itl in enumerate(vanilla_itl_ms):
        if bs > 0 and itl is not None and itl > 0:
            grid[bs, 0] = 1000.0 / itl
    result: FloatArray = grid
    return result


__all__ = ["Capacity", "Limit", "plain_decoding_grid", "replica_capacity"]
