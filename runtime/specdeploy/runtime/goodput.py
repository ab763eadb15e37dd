"""The goodput arithmetic shared by the profiler, the policy, the add-on and the operator.

Speculative decoding pays one draft+verify step of ITL seconds and produces
AL tokens per sequence. Acceptance is per position and conditional, with one
definition everywhere (DESIGN.md, "The math"):

    a_i = P(position i accepted | positions < i accepted)

where a position the drafter did not propose counts as *rejected*. n-gram
and suffix drafters often propose fewer than K tokens, or none; with this
definition

    AL(K) = 1 + sum_{i=1..K} prod_{j<=i} a_j        (the bonus token included)

is exactly the realized tokens per sequence per step, and

    goodput(bs, K) = AL(K) / ITL(bs, K)              (tokens/s per sequence)

The counts behind it, per position i (``reached_counts``):

* ``reached[i]``: sequences that verified a step with K >= i whose positions
  < i were all accepted: the denominator;
* ``proposed[i]``: of those, how many had a draft token at position i (the
  drafting rate q_i = proposed/reached is a property of the workload, like
  acceptance; EAGLE and draft models always propose, q_i = 1);
* ``accepted[i]``: how many accepted position i.

So a_i = accepted/reached, and accepted/proposed is the acceptance *given a
proposal*, which alone overstates what n-gram drafting earns. vLLM's own
per-position metric divides by all drafts, which is biased as soon as K
varies between steps.

Step cost depends on the tokens actually verified, not on K alone: a
sequence verifies 1 + L tokens, L its proposal length. ``offered[i]`` counts
sequences with K >= i whose proposal reached position i (whatever was
accepted), out of ``scheduled[i]`` sequences with K >= i: their ratio
s_i = P(L >= i) gives the expected verified tokens per sequence,
1 + sum_{i<=K} s_i (``verified_per_sequence``).

Nothing here knows about batches or hardware: those enter through ITL
(``cost.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def acceptance_lengths(per_position: Sequence[float], max_k: int) -> FloatArray:
    """AL(K) for K = 0..max_k; positions beyond the given list accept nothing.

    Returned as an array so callers index it by K without recomputing the
    running product.
    """
    if max_k < 0:
        raise ValueError(f"max_k must be >= 0, got {max_k}")
    rates = np.zeros(max_k, dtype=np.float64)
    known = min(max_k, len(per_position))
    rates[:known] = np.asarray(per_position[:known], dtype=np.float64)
    survival = np.cumprod(rates)
    lengths = np.empty(max_k + 1, dtype=np.float64)
    lengths[0] = 1.0
    lengths[1:] = 1.0 + np.cumsum(survival)
    return lengths


def acceptance_length(per_position: Sequence[float], k: int) -> float:
    """AL(K) for one K."""
    return float(acceptance_lengths(per_position, k)[k])


def goodput(acceptance_len: float, itl_seconds: float) -> float:
    """Tokens per second per sequence for one step of ``itl_seconds``."""
    if itl_seconds <= 0:
        raise ValueError(f"ITL must be > 0 s, got {itl_seconds}")
    return acceptance_len / itl_seconds


def per_position_from_counts(
    drafted: Sequence[float], accepted: Sequence[float], prior: Sequence[float], prior_weight: float
) -> FloatArray:
    """Conditional acceptance per position from counts, shrunk toward a prior.

    ``drafted[i]`` must count only drafts whose earlier positions were all
    accepted (the correct denominator: vLLM's per-position metric divides by
    all drafts, which is biased once K varies). ``prior_weight`` is the
    pseudo-count the prior is worth.
    """
    n = len(prior)
    d = np.zeros(n)
    a = np.zeros(n)
    d[: min(n, len(drafted))] = np.asarray(drafted[:n], dtype=np.float64)
    a[: min(n, len(accepted))] = np.asarray(accepted[:n], dtype=np.float64)
    p = np.asarray(prior, dtype=np.float64)
    result: FloatArray = (a + prior_weight * p) / (d + prior_weight)
    return np.clip(result, 0.0, 1.0)


def verified_per_sequence(survival: Sequence[float], k: int) -> float:
    """Expected tokens one sequence verifies at draft length ``k``: 1 + sum_{i<=k} s_i.

    ``survival[i-1]`` is s_i = P(proposal length >= i); positions beyond the
    list are proposed like the last one known (1.0 with no list: always K).
    """
    total = 1.0
    for i in range(k):
        total += survival[i] if i < len(survival) else (survival[-1] if survival else 1.0)
    return total


class DraftCounts(NamedTuple):
    """Per-position counts of one step or many (module docstring), positions 1..K."""

    reached: list[int]
    proposed: list[int]
    accepted: list[int]
    offered: list[int]
    scheduled: list[int]


def reached_counts(requests: Sequence[tuple[int, int, int]], positions: int) -> DraftCounts:
    """The reference definition: counts from (K, proposal length, accepted) per sequence-step.

    ``K`` is the draft length the sequence was scheduled with, the proposal
    length L <= K how many drafts the drafter produced (0: none, the
    sequence decoded one token), ``accepted`` <= L how many of them the
    target accepted (a prefix, as in verification). A position i <= K is
    reached when the first i-1 were accepted; proposed when, in addition,
    L >= i; accepted when ``accepted`` >= i; offered when L >= i; scheduled
    when K >= i. The add-on's fast version (``vllm_addon.steps.count_drafts``)
    is property-tested against this one.
    """
    counts = DraftCounts(*([0] * positions for _ in range(5)))
    for k, length, accepted in requests:
        k = min(k, positions)
        length = min(length, k)
        accepted = min(accepted, length)
        for i in range(k):  # position i + 1
            counts.scheduled[i] += 1
            counts.offered[i] += length > i
            if accepted >= i:
                counts.reached[i] += 1
                counts.proposed[i] += length > i
                counts.accepted[i] += accepted > i
    return counts


def conditional_counts(accepted_per_seq: Sequence[int], k: int) -> tuple[list[int], list[int]]:
    """(reached, accepted) per position when every sequence proposed all K drafts.

    The EAGLE and draft-model case of ``reached_counts``: ``accepted_per_seq[j]``
    is how many of sequence j's K drafts were accepted (a prefix). No serving path
    calls it (the add-on counts through ``reached_counts``); the hot-path benchmark
    and the simulator's tests state their traffic with it.
    """
    counts = reached_counts([(k, k, n) for n in accepted_per_seq], k)
    return counts.reached, counts.accepted
