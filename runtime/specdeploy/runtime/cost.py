"""Step cost as a function of what a step does: the tokens it verifies and the context it reads.

A step's time depends on the tokens it verifies and the KV it reads, not on
K as such (DESIGN.md, "The math"): T is the number of tokens verified in the
step (1 + proposal length per decoding sequence; n-gram drafters propose
fewer than K tokens, or none), C the context tokens summed over the batch.

    ITL(bs, T, C) = f_bs(T / bs) + gamma * (C - bs * c_ref)

``f_bs`` is the step time at the profile's reference context ``c_ref`` as a
function of the tokens verified per sequence: piecewise linear through the
cells measured at that batch size (each K measured gives one knot; the
line between knots prices proposals shorter than K, the end slopes
extrapolate), so the model is exact at every measured cell and keeps the
kink where verification turns from memory-bound to compute-bound. Between
measured batch sizes ``f`` is interpolated linearly, beyond them held.
``gamma`` is the cost per context token (KV reads: additive, shared by all
batch sizes), fitted by least squares when the profile measured the same
cells at different contexts (the context axis); otherwise 0, and the
profile's context is part of ``f``.

``vanilla`` is plain decoding (no speculation configured), which costs less
than K=0 with speculation configured (the drafter's sync pass, the
speculation bookkeeping, piecewise graphs): the profile measures it per
batch size where it can (``ProfileSpec.baseline``) and the model shifts it
by context like the rest.

All times in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.goodput import FloatArray

MIN_CONTEXT_SPREAD = 1.5
"""The largest cell context over the smallest must reach this for gamma to be fitted:
a profile made at one context cannot tell the KV cost from the fixed cost."""


@dataclass(frozen=True)
class Cell:
    """One measured cell, as the fit needs it (per-sequence means)."""

    batch_size: int
    itl_ms: float
    verified_per_sequence: float
    context_per_sequence: float
    weight: float = 1.0


@dataclass(frozen=True)
class Knots:
    """f_bs at one batch size: step time (ms, reference context) at verified tokens per sequence."""

    verified: tuple[float, ...]
    itl_ms: tuple[float, ...]

    def at(self, verified: float) -> float:
        """Piecewise linear through the knots, extrapolated with the end slopes."""
        v, y = self.verified, self.itl_ms
        if len(v) == 1:
            return y[0]
        if verified <= v[0]:
            slope = (y[1] - y[0]) / (v[1] - v[0])
            return y[0] + slope * (verified - v[0])
        if verified >= v[-1]:
            slope = (y[-1] - y[-2]) / (v[-1] - v[-2])
            return y[-1] + slope * (verified - v[-1])
        return float(np.interp(verified, v, y))


@dataclass(frozen=True)
class StepCostModel:
    """ITL(bs, T, C) in ms (module docstring)."""

    sizes: tuple[int, ...]
    knots: tuple[Knots, ...]
    gamma: float
    reference_context: float
    """The mean context per sequence ``knots`` hold (the serving context when
    nothing live is known)."""
    vanilla_sizes: tuple[int, ...] = ()
    vanilla_ms: tuple[float, ...] = ()
    """Plain decoding's step time at ``vanilla_sizes`` and ``reference_context`` (ms)."""

    def __post_init__(self) -> None:
        if not self.sizes or len(self.sizes) != len(self.knots):
            raise ValueError("sizes and knots must be non-empty and of equal length")
        if list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError("sizes must be strictly increasing")
        if len(self.vanilla_sizes) != len(self.vanilla_ms):
            raise ValueError("vanilla_sizes and vanilla_ms must be of equal length")

    # --- fitting --------------------------------------------------------------

    @classmethod
    def fit(cls, cells: Sequence[Cell], vanilla: Sequence[tuple[int, float]] = ()) -> StepCostModel:
        """From measured cells (module docstring); ``vanilla``: (bs, itl_ms) at their context."""
        if not cells:
            raise ValueError("no cells to fit")
        contexts = [c.context_per_sequence for c in cells]
        reference = float(np.average(contexts, weights=[c.weight for c in cells]))
        spread = min(contexts) > 0 and max(contexts) / min(contexts) >= MIN_CONTEXT_SPREAD
        gamma = _fit_gamma(cells) if spread else 0.0
        sizes = sorted({c.batch_size for c in cells})
        knots = tuple(
            _knots([c for c in cells if c.batch_size == bs], gamma, reference) for bs in sizes
        )
        ordered = sorted(vanilla)
        return cls(
            sizes=tuple(sizes),
            knots=knots,
            gamma=gamma,
            reference_context=reference,
            vanilla_sizes=tuple(bs for bs, _ in ordered),
            vanilla_ms=tuple(itl for _, itl in ordered),
        )

    # --- prediction -------------------------------------------------------------

    def at_reference(self, batch_size: float, verified_per_sequence: float) -> float:
        """f(bs, v): step time at the reference context, interpolated between measured sizes."""
        sizes = self.sizes
        if batch_size <= sizes[0]:
            return self.knots[0].at(verified_per_sequence)
        if batch_size >= sizes[-1]:
            return self.knots[-1].at(verified_per_sequence)
        j = int(np.searchsorted(sizes, batch_size))
        lo, hi = sizes[j - 1], sizes[j]
        w = (batch_size - lo) / (hi - lo)
        a = self.knots[j - 1].at(verified_per_sequence)
        b = self.knots[j].at(verified_per_sequence)
        return (1.0 - w) * a + w * b

    def itl_ms(self, batch_size: float, verified_tokens: float, context_tokens: float) -> float:
        """Step time for ``verified_tokens`` and ``context_tokens`` summed over the batch."""
        bs = max(batch_size, 1.0)
        base = self.at_reference(bs, verified_tokens / bs)
        shift = self.gamma * (context_tokens - bs * self.reference_context)
        return max(base + shift, 1e-6)

    def vanilla_itl_ms(self, batch_size: float, context_per_sequence: float) -> float | None:
        """Plain decoding's step time (None where the profile has no baseline)."""
        if not self.vanilla_sizes:
            return None
        at_reference = float(np.interp(batch_size, self.vanilla_sizes, self.vanilla_ms))
        shift = self.gamma * batch_size * (context_per_sequence - self.reference_context)
        return max(at_reference + shift, 1e-6)

    def grid(
        self,
        max_batch_size: int,
        max_k: int,
        survival: Sequence[float],
        context_per_sequence: float | None = None,
    ) -> FloatArray:
        """ITL in ms, shape (max_bs + 1, max_k + 1), indexed [batch size, K]; row 0 NaN.

        ``survival[i-1]`` is P(proposal length >= i) (``goodput.verified_per_sequence``).
        """
        verified = [1.0]
        for k in range(1, max_k + 1):
            s = survival[k - 1] if k - 1 < len(survival) else (survival[-1] if survival else 1.0)
            verified.append(verified[-1] + s)
        return self.grid_at(max_batch_size, verified, context_per_sequence)

    def grid_at(
        self,
        max_batch_size: int,
        verified_per_sequence: Sequence[float],
        context_per_sequence: float | None = None,
    ) -> FloatArray:
        """ITL in ms at the given verified tokens per sequence (one column each); row 0 NaN."""
        ctx = self.reference_context if context_per_sequence is None else context_per_sequence
        sizes = np.arange(max_batch_size + 1, dtype=np.float64)
        grid = np.empty((max_batch_size + 1, len(verified_per_sequence)))
        for j, v in enumerate(verified_per_sequence):
            at_sizes = [k.at(v) for k in self.knots]
            grid[:, j] = np.interp(sizes, self.sizes, at_sizes)
        grid += (self.gamma * sizes * (ctx - self.reference_context))[:, None]
        result: FloatArray = np.maximum(grid, 1e-6)
        result[0] = np.nan
        return result


def _fit_gamma(cells: Sequence[Cell]) -> float:
    """gamma from all cells jointly: one intercept per (batch size, K) knot, one context slope."""
    keys = sorted({(c.batch_size, round(c.verified_per_sequence, 6)) for c in cells})
    index = {key: i for i, key in enumerate(keys)}
    x = np.zeros((len(cells), len(keys) + 1))
    y = np.zeros(len(cells))
    w = np.zeros(len(cells))
    for row, c in enumerate(cells):
        x[row, index[(c.batch_size, round(c.verified_per_sequence, 6))]] = 1.0
        x[row, -1] = c.batch_size * c.context_per_sequence
        y[row] = c.itl_ms
        w[row] = np.sqrt(c.weight)
    solution, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    return max(float(solution[-1]), 0.0)


def _knots(cells: Sequence[Cell], gamma: float, reference: float) -> Knots:
    """The knots at one batch size: cells moved to the reference context, equal v averaged."""
    by_v: dict[float, list[tuple[float, float]]] = {}
    for c in cells:
        at_ref = c.itl_ms - gamma * c.batch_size * (c.context_per_sequence - reference)
        by_v.setdefault(round(c.verified_per_sequence, 6), []).append((at_ref, c.weight))
    verified = sorted(by_v)
    itl = [
        float(np.average([v for v, _ in by_v[key]], weights=[w for _, w in by_v[key]]))
        for key in verified
    ]
    return Knots(tuple(verified), tuple(max(v, 1e-6) for v in itl))
