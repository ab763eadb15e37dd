"""Confidence intervals for small samples of autocorrelated measurements.

The profiler's cells and the CPU benchmarks have few repeats (2-8) and step
times that are correlated from one step to the next (lag-1 autocorrelation
up to 0.8 in the shipped SmolLM2 raw file: a prompt's context, the host's
neighbours and the allocator move slowly). Two habits make such intervals
too narrow: a normal quantile with a handful of degrees of freedom (z = 1.96
where t(1) = 12.7), and a standard error that treats correlated steps as
independent. Here the quantile is Student's t, and steps are grouped into
non-overlapping *batch means* of ``BATCH_STEPS`` consecutive steps within a
repeat, which are close to independent when the batch is several times the
correlation time; their spread gives the standard error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BATCH_STEPS = 8
"""Consecutive steps per batch mean. An AR(1) series with lag-1 correlation rho
has correlation time (1 + rho) / (1 - rho): 3 steps at 0.5, 9 at 0.8; adjacent
8-step batch means of the latter are correlated about 0.3, of the former < 0.1."""

_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
"""Student's t 97.5% quantiles for 1..30 degrees of freedom."""

Z95 = 1.96


def t_quantile(dof: int, z: float = Z95) -> float:
    """Student's t quantile with ``dof`` degrees of freedom at the normal quantile ``z``.

    Exact (to 3 decimals) for z = 1.96 and dof <= 30; otherwise the
    Cornish-Fisher expansion in 1/dof, within 1% for dof >= 5. dof < 1: inf.
    """
    if dof < 1:
        return math.inf
    if abs(z - Z95) < 1e-9 and dof <= len(_T975):
        return _T975[dof - 1]
    v = float(dof)
    z3, z5, z7, z9 = z**3, z**5, z**7, z**9
    return (
        z
        + (z3 + z) / (4 * v)
        + (5 * z5 + 16 * z3 + 3 * z) / (96 * v**2)
        + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v**3)
        + (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * v**4)
    )


def batch_means(series: Sequence[Sequence[float]], batch: int = BATCH_STEPS) -> list[float]:
    """Means of consecutive ``batch``-step blocks, never across two series (repeats).

    A series shorter than two batches is cut in two halves instead (when it
    has at least 2 steps), so that every repeat contributes; a remainder
    shorter than half a batch joins the block before it.
    """
    out: list[float] = []
    for steps in series:
        n = len(steps)
        if n < 2:
            out.extend(float(s) for s in steps)
            continue
        size = batch if n >= 2 * batch else n // 2
        starts = list(range(0, n - size + 1, size))
        for i, start in enumerate(starts):
            end = n if i == len(starts) - 1 else start + size
            block = steps[start:end]
            out.append(math.fsum(block) / len(block))
    return out


def mean_half_width(values: Sequence[float], z: float = Z95) -> float:
    """Half-width of the ``z``-level interval of the mean of independent ``values``
    (t quantile with n - 1 degrees of freedom); inf with fewer than 2 values."""
    n = len(values)
    if n < 2:
        return math.inf
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return t_quantile(n - 1, z) * math.sqrt(var / n)
