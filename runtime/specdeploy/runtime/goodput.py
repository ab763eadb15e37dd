"""The goodput arithmetic shared by the profiler, the policy and the operator.

Speculative decoding pays one draft+verify step of ITL seconds and produces
AL tokens per sequence. Acceptance is per position and conditional: a_i is
the probability that draft position i is accepted given that every earlier
position was, so

    AL(K) = 1 + sum_{i=1..K} prod_{j<=i} a_j        (the bonus token included)
    goodput(bs, K) = AL(K) / ITL(bs, K)              (tokens/s per sequence)

Nothing here knows about batches or hardware: those enter through ITL.
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
