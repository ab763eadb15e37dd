"""Step cost as a function of what a step does: ITL = alpha(bs) + beta(bs) * T + gamma * C.

A step's time depends on the tokens it verifies and the KV it reads, not on
K as such (DESIGN.md, "The math"): T is the number of tokens verified in the
step (1 + proposal length per decoding sequence; n-gram drafters propose
fewer than K tokens, or none), C the context tokens summed over the batch
(an additive KV cost). Per batch size, ``alpha`` is the fixed part (weights
read once per step, launches, host work) and ``beta`` the cost per verified
token; ``gamma`` is the cost per context token, shared by all batch sizes.

``StepCostModel.fit`` estimates the parameters from a profile's cells by
least squares: at each measured batch size the cells of different K give
different T (``beta``), and cells at different context lengths give
``gamma`` when the profile varies the context enough; otherwise ``gamma``
is 0 and the context of the profile is part of ``alpha``. Between measured
batch sizes the parameters are interpolated linearly; beyond them held.

``vanilla`` is plain decoding (no speculation configured), which costs less
than K=0 with speculation configured (the drafter's sync pass, the
speculation bookkeeping, piecewise graphs): the profile measures it per
batch size where it can (``ProfileSpec.baseline``), and the model prices it
the same way with T = bs.

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
class StepCostModel:
    """ITL(bs, T, C) in ms; parameters at the measured batch sizes (module docstring)."""

    sizes: tuple[int, ...]
    alpha: tuple[float, ...]
    beta: tuple[float, ...]
    gamma: float
    reference_context: float
    """The mean context per sequence the profile was measured at (the serving
    context when nothing live is known)."""
    vanilla_sizes: tuple[int, ...] = ()
    vanilla_ms: tuple[float, ...] = ()
    """Plain decoding's step time at ``vanilla_sizes`` and ``reference_context`` (ms)."""

    def __post_init__(self) -> None:
        if (
            not self.sizes
            or len(self.sizes) != len(self.alpha)
            or len(self.alpha) != len(self.beta)
        ):
            raise ValueError("sizes, alpha and beta must be non-empty and of equal length")
        if list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError("sizes must be strictly increasing")
        if len(self.vanilla_sizes) != len(self.vanilla_ms):
            raise ValueError("vanilla_sizes and vanilla_ms must be of equal length")

    # --- fitting --------------------------------------------------------------

    @classmethod
    def fit(cls, cells: Sequence[Cell], vanilla: Sequence[tuple[int, float]] = ()) -> StepCostModel:
        """Least squares over the cells (module docstring); ``vanilla`` is (bs, itl_ms)."""
        if not cells:
            raise ValueError("no cells to fit")
        contexts = [c.context_per_sequence for c in cells]
        reference = float(np.average(contexts, weights=[c.weight for c in cells]))
        fit_gamma = min(contexts) > 0 and max(contexts) / min(contexts) >= MIN_CONTEXT_SPREAD
        sizes = sorted({c.batch_size for c in cells})
        gamma = _fit_gamma(cells, sizes) if fit_gamma else 0.0
        alpha, beta = [], []
        for bs in sizes:
            a, b = _fit_size([c for c in cells if c.batch_size == bs], gamma)
            alpha.append(a)
            beta.append(b)
        beta = _fill_unidentified(sizes, beta)
        alpha = [
            _alpha_given_beta([c for c in cells if c.batch_size == bs], b, gamma)
            for bs, b in zip(sizes, beta, strict=True)
        ]
        v_sizes = tuple(bs for bs, _ in sorted(vanilla))
        return cls(
            sizes=tuple(sizes),
            alpha=tuple(alpha),
            beta=tuple(beta),
            gamma=gamma,
            reference_context=reference,
            vanilla_sizes=v_sizes,
            vanilla_ms=tuple(itl for _, itl in sorted(vanilla)),
        )

    # --- prediction -------------------------------------------------------------

    def parameters(self, batch_size: float) -> tuple[float, float]:
        """(alpha, beta) at a batch size: interpolated, held beyond the measured span."""
        return (
            float(np.interp(batch_size, self.sizes, self.alpha)),
            float(np.interp(batch_size, self.sizes, self.beta)),
        )

    def itl_ms(self, batch_size: float, verified_tokens: float, context_tokens: float) -> float:
        """Step time for ``verified_tokens`` and ``context_tokens`` summed over the batch."""
        alpha, beta = self.parameters(batch_size)
        return alpha + beta * verified_tokens + self.gamma * context_tokens

    def speculative_itl_ms(
        self, batch_size: float, verified_per_sequence: float, context_per_sequence: float
    ) -> float:
        """Step time with speculation configured, from per-sequence means."""
        return self.itl_ms(
            batch_size,
            batch_size * verified_per_sequence,
            batch_size * context_per_sequence,
        )

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
        ctx = self.reference_context if context_per_sequence is None else context_per_sequence
        sizes = np.arange(max_batch_size + 1, dtype=np.float64)
        alpha = np.interp(sizes, self.sizes, self.alpha)
        beta = np.interp(sizes, self.sizes, self.beta)
        verified = np.ones(max_k + 1)
        for k in range(1, max_k + 1):
            s = survival[k - 1] if k - 1 < len(survival) else (survival[-1] if survival else 1.0)
            verified[k] = verified[k - 1] + s
        grid = (
            alpha[:, None]
            + beta[:, None] * sizes[:, None] * verified[None, :]
            + self.gamma * sizes[:, None] * ctx
        )
        grid[0] = np.nan
        result: FloatArray = np.maximum(grid, 1e-6)
        result[0] = np.nan
        return result


def _fit_gamma(cells: Sequence[Cell], sizes: list[int]) -> float:
    """gamma from all cells jointly: per-size alpha and beta, one shared context slope."""
    index = {bs: i for i, bs in enumerate(sizes)}
    rows, target, weights = [], [], []
    for c in cells:
        row = np.zeros(2 * len(sizes) + 1)
        i = index[c.batch_size]
        row[2 * i] = 1.0
        row[2 * i + 1] = c.batch_size * c.verified_per_sequence
        row[-1] = c.batch_size * c.context_per_sequence
        rows.append(row)
        target.append(c.itl_ms)
        weights.append(c.weight)
    x = np.array(rows)
    y = np.array(target)
    w = np.sqrt(np.array(weights))
    solution, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    return max(float(solution[-1]), 0.0)


def _fit_size(cells: Sequence[Cell], gamma: float) -> tuple[float, float]:
    """(alpha, beta) at one batch size; beta NaN where the cells verify one T only."""
    t = np.array([c.batch_size * c.verified_per_sequence for c in cells])
    y = np.array([c.itl_ms - gamma * c.batch_size * c.context_per_sequence for c in cells])
    w = np.array([c.weight for c in cells])
    if np.ptp(t) < 1e-9:
        return float(np.average(y, weights=w)), float("nan")
    x = np.stack([np.ones_like(t), t], axis=1)
    sw = np.sqrt(w)
    (alpha, beta), *_ = np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)
    return float(alpha), max(float(beta), 0.0)


def _fill_unidentified(sizes: list[int], beta: list[float]) -> list[float]:
    """A batch size whose cells verify one T only takes beta from its neighbours."""
    known = [(bs, b) for bs, b in zip(sizes, beta, strict=True) if np.isfinite(b)]
    if not known:
        return [0.0] * len(sizes)
    xs = [bs for bs, _ in known]
    ys = [b for _, b in known]
    return [
        b if np.isfinite(b) else float(np.interp(bs, xs, ys))
        for bs, b in zip(sizes, beta, strict=True)
    ]


def _alpha_given_beta(cells: Sequence[Cell], beta: float, gamma: float) -> float:
    residual = [
        c.itl_ms
        - beta * c.batch_size * c.verified_per_sequence
        - gamma * c.batch_size * c.context_per_sequence
        for c in cells
    ]
    return float(np.average(residual, weights=[c.weight for c in cells]))
