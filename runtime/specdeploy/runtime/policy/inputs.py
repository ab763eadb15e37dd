"""Validation of the adaptive policy's inputs; each error names the parameter at fault.

A policy is built from a profile in a pod that must never crash on a bad table
(DESIGN.md, "The runtime"): the add-on catches these ValueErrors and keeps the
last good policy, so the messages must say what to fix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.policy.static import checked_lookup


def checked_grid(itl_ms: npt.ArrayLike) -> FloatArray:
    """A (max_bs + 1, max_k + 1) float grid: positive ITL or NaN (unavailable)."""
    grid = np.array(itl_ms, dtype=np.float64)
    if grid.ndim != 2 or grid.shape[0] < 2 or grid.shape[1] < 1:
        raise ValueError(
            f"itl_ms: must be 2-D with shape (max_batch_size + 1, max_k + 1), got {grid.shape}"
        )
    body = grid[1:]
    bad = ~np.isnan(body) & ~((body > 0) & np.isfinite(body))
    if bad.any():
        bs, k = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"itl_ms: step times must be > 0 and finite (NaN: unavailable), "
            f"got {body[bs, k]} at batch size {bs + 1}, K={k}"
        )
    grid[0] = np.nan  # row 0 (batch size 0) is never used
    return grid


def checked_allowed(allowed_k: Sequence[int] | None, grid: FloatArray) -> tuple[int, ...]:
    """The K values the policy may choose: given, or every K with some finite ITL."""
    available = {k for k in range(grid.shape[1]) if np.isfinite(grid[1:, k]).any()}
    if allowed_k is None:
        allowed = sorted(available)
    else:
        allowed = sorted(set(allowed_k))
        for k in allowed:
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < grid.shape[1]:
                raise ValueError(f"allowed_k: K={k!r} is not an integer in 0..{grid.shape[1] - 1}")
            if k not in available:
                raise ValueError(f"allowed_k: K={k} has no finite step time in itl_ms")
    if not allowed:
        raise ValueError("allowed_k: must not be empty (no K has a finite step time)")
    return tuple(allowed)


def checked_rows(grid: FloatArray, allowed: tuple[int, ...]) -> None:
    """Every batch size has at least one allowed K it can run."""
    covered = np.isfinite(grid[1:, list(allowed)]).any(axis=1)
    if not covered.all():
        bs = int(np.argmin(covered)) + 1
        raise ValueError(f"itl_ms: batch size {bs} has no finite step time for any allowed K")


def checked_prior(prior: Sequence[float], allowed: tuple[int, ...]) -> list[float]:
    """Acceptance per position, one per draft position up to the largest allowed K."""
    rates = [float(p) for p in prior]
    if len(rates) < max(allowed):
        raise ValueError(
            f"prior: has {len(rates)} positions but allowed_k goes up to K={max(allowed)}"
        )
    for i, p in enumerate(rates):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"prior[{i}]: acceptance must be in [0, 1], got {p}")
    return rates[: max(allowed)]


def checked_fallback(fallback: Sequence[int], allowed: tuple[int, ...]) -> list[int]:
    values = checked_lookup(fallback, "fallback")
    if len(values) > 1:
        values[0] = values[1]  # index 0 (nothing scheduled) is unused; keep it in the set
    for i, k in enumerate(values):
        if k not in allowed:
            raise ValueError(f"fallback[{i}]: K={k} is not in allowed_k {list(allowed)}")
    return values
