"""The goodput arithmetic shared by the profiler, the policy and the operator.

Speculative decoding pays one draft+verify step of ITL seconds and produces
AL tokens per sequence. Acceptance is per position and conditional: a_i is
the probability that draft position i is accepted given that every earlier
position was, so

    AL(K) = 1 + sum_{i=1..K} prod_{j<=i} a_j        (the bonus token included)
    goodput(bs, K) = AL(K) / ITL(bs, K)              (tokens/s per sequence)

Nothing here knows about batches or hardware: those enter through ITL.

Denominators: ``drafted[i]`` counts sequences whose draft position ``i + 1``
was verified *and* whose positions ``1..i`` were all accepted, so that
``accepted[i] / drafted[i]`` estimates the conditional acceptance a_{i+1}
(``conditional_counts`` is the reference definition; the add-on's fast
version, ``vllm_addon.steps.conditional_from_drafts``, is property-tested
against it). vLLM's own per-position metric divides by all drafts instead,
which is biased as soon as K varies between steps.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def conditional_counts(accepted_per_seq: Sequence[int], k: int) -> tuple[list[int], list[int]]:
    """Per-position (drafted, accepted) with correct denominators from per-sequence counts.

    ``accepted_per_seq[j]`` is how many of sequence j's K drafts were accepted
    (a prefix, as in verification). Position i (1-based) was "drafted" for a
    sequence when K >= i and its first i-1 drafts were accepted.
    """
    drafted = [0] * k
    accepted = [0] * k
    for n in accepted_per_seq:
        n = min(n, k)
        for i in range(min(n + 1, k)):
            drafted[i] += 1
        for i in range(n):
            accepted[i] += 1
    return drafted, accepted
