"""A schedule re-derived from live acceptance and live-corrected step cost.

The operator's telemetry loop (and, one day, a pod) knows two things the
profile did not: the acceptance of the traffic actually served (it depends
on the workload) and how the step times of this hardware compare with the
profile's today (other clocks, another driver). DESIGN.md's merge rule is
applied here: acceptance from live counts (the profile's as prior, by the
caller), step cost from the profile's cost model (``schedule.cost_model``)
scaled per batch size by the live correction. The result is a schedule in
vLLM's shape, validated by the same rules as every other table, and the
predicted gain of one schedule over another under the live batch-size
distribution, which is what "is a new table worth a push" asks.

Pure (numpy only); the runtime never imports the operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specdeploy.runtime.goodput import FloatArray, acceptance_lengths
from specdeploy.runtime.profile import ProfileSpec
from specdeploy.runtime.ranges import Range, ScheduleError, compress, k_at, schedule_problems
from specdeploy.runtime.schedule import best_k_per_batch_size, k_values, modelled_itl_grid


def live_goodput_grid(
    spec: ProfileSpec,
    per_position: Sequence[float],
    itl_scale: FloatArray | None = None,
) -> FloatArray:
    """Goodput (tokens/s per sequence), shape (max_bs + 1, maxK + 1), from live inputs.

    ``itl_scale[bs]`` multiplies the profile's modelled step time at batch
    size ``bs`` (1.0: the profile holds); None applies no correction. Cells
    the profile cannot price stay NaN (``schedule.modelled_itl_grid``).
    """
    itl_ms = modelled_itl_grid(spec)
    if itl_scale is not None:
        if itl_scale.shape[0] != itl_ms.shape[0]:
            raise ValueError(
                f"itl_scale has {itl_scale.shape[0]} rows, the profile's grid {itl_ms.shape[0]}"
            )
        itl_ms = itl_ms * itl_scale[:, np.newaxis]
    lengths = acceptance_lengths(per_position, spec.fingerprint.max_k)
    result: FloatArray = lengths[np.newaxis, :] / (itl_ms / 1000.0)
    return result


def derive_live_schedule(
    spec: ProfileSpec, goodput: FloatArray, allowed: Sequence[int] | None = None
) -> list[Range]:
    """The goodput-optimal schedule over the K both measured and ``allowed`` (the pods' K set).

    Raises ``ScheduleError`` when the result would break vLLM's rules, which
    a correct grid never does: the check is the promise that nothing
    invalid leaves this function.
    """
    usable = sorted(set(k_values(spec)) & set(allowed if allowed is not None else k_values(spec)))
    if not usable:
        usable = [0]
    best = best_k_per_batch_size(goodput, allowed=usable)
    ranges = compress(best)
    problems = list(schedule_problems(ranges, max_k=spec.fingerprint.max_k))
    if problems:
        raise ScheduleError(problems)
    return ranges


def throughput(
    goodput: FloatArray, schedule: Sequence[Sequence[int]], weights: Mapping[int, float]
) -> float:
    """Tokens/s summed over the batch: sum over bs of weight * bs * goodput(bs, K(bs)).

    ``weights`` is the share of steps at each batch size (they need not sum
    to 1). A K the grid cannot price at a batch size counts as nothing
    there, so a schedule that would run an unpriced K never looks better.
    """
    total = 0.0
    rows = goodput.shape[0]
    for bs, weight in weights.items():
        row = min(max(int(bs), 1), rows - 1)
        k = min(k_at(schedule, row), goodput.shape[1] - 1)
        value = goodput[row, k]
        if np.isfinite(value):
            total += weight * row * float(value)
    return total


def predicted_gain(
    goodput: FloatArray,
    candidate: Sequence[Sequence[int]],
    current: Sequence[Sequence[int]],
    weights: Mapping[int, float],
) -> float:
    """Relative throughput of ``candidate`` over ``current`` (0.05: 5% more), same inputs."""
    base = throughput(goodput, current, weights)
    if base <= 0.0:
        return 0.0 if throughput(goodput, candidate, weights) <= 0.0 else float("inf")
    return throughput(goodput, candidate, weights) / base - 1.0


__all__ = [
    "derive_live_schedule",
    "live_goodput_grid",
    "predicted_gain",
    "throughput",
]
