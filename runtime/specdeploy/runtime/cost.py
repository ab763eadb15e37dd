"""Step cost from what a step does: the K scheduled, the tokens verified, the context read.

    ITL(bs, K, T, C) = f_K(bs) + beta(bs) * (T - bs * v_K(bs)) + gamma * (C - bs * c_ref)

``f_K(bs)`` is the step time the profile measured at K (interpolated
linearly between the batch sizes K was measured at, as ``schedule.itl_grid``
does), with ``v_K`` the tokens a sequence verified per step in those cells.
It keeps what depends on K itself: the drafter's passes (an EAGLE head runs
K times; an n-gram lookup runs whether or not it finds a match) and the
kink where verification turns from memory-bound to compute-bound.

The two corrections are what DESIGN.md's "The math" asks for:

* tokens actually verified: a sequence verifies 1 + its proposal length, and
  n-gram drafters propose fewer than K tokens, or none, at a rate that is a
  property of the workload. When live proposals are shorter (or longer)
  than in the profile's cells, the step costs ``beta(bs)`` per verified
  token less (or more): ``beta`` is the profile's own slope of step time
  over verified tokens at that batch size.
* context: KV reads add ``gamma`` per context token (summed over the batch),
  fitted by least squares when the profile measured cells at different
  contexts (the context axis); otherwise 0, and the profile's context
  ``c_ref`` is part of ``f``.

``vanilla`` is plain decoding (no speculation configured), which costs less
than K=0 with speculation configured (the drafter's sync pass, the
speculation bookkeeping, piecewise graphs): the profile measures it per
batch size where it can (``ProfileSpec.baseline``), shifted by context like
the rest.

All times in milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    k: int
    itl_ms: float
    verified_per_sequence: float
    context_per_sequence: float
    weight: float = 1.0


@dataclass(frozen=True)
class Column:
    """One K's measurements at the reference context: f_K and v_K at measured sizes."""

    sizes: tuple[int, ...]
    itl_ms: tuple[float, ...]
    verified: tuple[float, ...]


@dataclass(frozen=True)
class StepCostModel:
    """ITL(bs, K, T, C) in ms (module docstring)."""

    columns: Mapping[int, Column]
    beta_sizes: tuple[int, ...]
    beta: tuple[float, ...]
    gamma: float
    reference_context: float
    """The mean context per sequence the columns hold (the serving context when
    nothing live is known)."""
    vanilla_sizes: tuple[int, ...] = ()
    vanilla_ms: tuple[float, ...] = ()
    """Plain decoding's step time at ``vanilla_sizes`` and ``reference_context`` (ms)."""

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError("columns must not be empty")
        if len(self.beta_sizes) != len(self.beta) or not self.beta_sizes:
            raise ValueError("beta_sizes and beta must be non-empty and of equal length")
        if len(self.vanilla_sizes) != len(self.vanilla_ms):
            raise ValueError("vanilla_sizes and vanilla_ms must be of equal length")

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted(self.columns))

    # --- fitting --------------------------------------------------------------

    @classmethod
    def fit(cls, cells: Sequence[Cell], vanilla: Sequence[tuple[int, float]] = ()) -> StepCostModel:
        """From measured cells (module docstring); ``vanilla``: (bs, itl_ms) at their context."""
        if not cells:
            raise ValueError("no cells to fit")
        contexts = [c.context_per_sequence for c in cells]
        reference = float(np.average(contexts, weights=[c.weight for c in cells]))
        spread = min(contexts) > 0 and max(contexts) / min(contexts) >= MIN_CONTEXT_SPREAD
        axis = _context_axis(cells)
        gamma = _fit_gamma(axis) if spread and axis else 0.0
        columns = {
            k: _column([c for c in cells if c.k == k], gamma, reference)
            for k in sorted({c.k for c in cells})
        }
        sizes = sorted({c.batch_size for c in cells})
        beta = _beta(columns, sizes)
        ordered = sorted(vanilla)
        return cls(
            columns=columns,
            beta_sizes=tuple(sizes),
            beta=tuple(beta),
            gamma=gamma,
            reference_context=reference,
            vanilla_sizes=tuple(bs for bs, _ in ordered),
            vanilla_ms=tuple(itl for _, itl in ordered),
        )

    # --- prediction -------------------------------------------------------------

    def base(self, batch_size: float, k: int) -> tuple[float, float]:
        """(f_K(bs), v_K(bs)): the profile's step time and verified tokens per sequence at K.

        Interpolated between the batch sizes K was measured at, held beyond them
        (whether a K may be used there at all is the caller's business:
        ``schedule.modelled_itl_grid`` masks it as ``itl_grid`` does).
        """
        column = self.columns.get(k)
        if column is None:
            raise KeyError(f"K={k}: not measured (measured: {list(self.ks)})")
        return (
            float(np.interp(batch_size, column.sizes, column.itl_ms)),
            float(np.interp(batch_size, column.sizes, column.verified)),
        )

    def beta_at(self, batch_size: float) -> float:
        """The step time per verified token at a batch size (ms)."""
        return float(np.interp(batch_size, self.beta_sizes, self.beta))

    def itl_ms(
        self, batch_size: float, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """Step time at K for ``verified_tokens`` and ``context_tokens`` summed over the batch."""
        bs = max(batch_size, 1.0)
        f, v = self.base(bs, k)
        shift = self.beta_at(bs) * (verified_tokens - bs * v)
        shift += self.gamma * (context_tokens - bs * self.reference_context)
        return max(f + shift, 1e-6)

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
        verified_per_sequence: Sequence[float] | None = None,
        context_per_sequence: float | None = None,
    ) -> FloatArray:
        """ITL in ms, shape (max_bs + 1, max_k + 1), indexed [batch size, K]; row 0 NaN.

        ``verified_per_sequence[k]`` is the tokens a sequence verifies at K
        (``goodput.verified_per_sequence``); None: as in the profile's cells.
        Columns of K never measured are NaN.
        """
        ctx = self.reference_context if context_per_sequence is None else context_per_sequence
        sizes = np.arange(max_batch_size + 1, dtype=np.float64)
        beta = np.interp(sizes, self.beta_sizes, self.beta)
        grid = np.full((max_batch_size + 1, max_k + 1), np.nan)
        for k, column in self.columns.items():
            if k > max_k:
                continue
            f = np.interp(sizes, column.sizes, column.itl_ms)
            if verified_per_sequence is not None:
                v = np.interp(sizes, column.sizes, column.verified)
                f = f + beta * sizes * (verified_per_sequence[k] - v)
            grid[:, k] = f
        grid += (self.gamma * sizes * (ctx - self.reference_context))[:, None]
        result: FloatArray = np.maximum(grid, 1e-6)
        result[0] = np.nan
        return result


def _context_axis(cells: Sequence[Cell]) -> list[Cell]:
    """The cells of every (batch size, K) measured at contexts ``MIN_CONTEXT_SPREAD``
    apart: only there is the context slope identified. Cells that differ in
    context only incidentally, one per (batch size, K) (a repeat that ran longer
    read more context), say nothing about it: with one intercept per
    (batch size, K) the slope would be whatever least squares makes of noise."""
    groups: dict[tuple[int, int], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.batch_size, c.k), []).append(c)
    out: list[Cell] = []
    for group in groups.values():
        contexts = [c.context_per_sequence for c in group]
        spread = min(contexts) > 0 and max(contexts) / min(contexts) >= MIN_CONTEXT_SPREAD
        if len(group) >= 2 and spread:
            out.extend(group)
    return out


def _fit_gamma(cells: Sequence[Cell]) -> float:
    """gamma from all cells jointly: one intercept per (batch size, K), one context slope."""
    keys = sorted({(c.batch_size, c.k) for c in cells})
    index = {key: i for i, key in enumerate(keys)}
    x = np.zeros((len(cells), len(keys) + 1))
    y = np.zeros(len(cells))
    w = np.zeros(len(cells))
    for row, c in enumerate(cells):
        x[row, index[(c.batch_size, c.k)]] = 1.0
        x[row, -1] = c.batch_size * c.context_per_sequence
        y[row] = c.itl_ms
        w[row] = np.sqrt(c.weight)
    solution, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    return max(float(solution[-1]), 0.0)


def _column(cells: Sequence[Cell], gamma: float, reference: float) -> Column:
    """One K's cells moved to the reference context; cells at one size (other contexts) pooled."""
    by_size: dict[int, list[Cell]] = {}
    for c in cells:
        by_size.setdefault(c.batch_size, []).append(c)
    sizes = sorted(by_size)
    itl, verified = [], []
    for bs in sizes:
        group = by_size[bs]
        weights = [c.weight for c in group]
        at_ref = [c.itl_ms - gamma * bs * (c.context_per_sequence - reference) for c in group]
        itl.append(max(float(np.average(at_ref, weights=weights)), 1e-6))
        v = [c.verified_per_sequence for c in group]
        verified.append(float(np.average(v, weights=weights)))
    return Column(tuple(sizes), tuple(itl), tuple(verified))


def _beta(columns: Mapping[int, Column], sizes: Sequence[int]) -> list[float]:
    """Per size, the slope of step time over verified tokens across K >= 1 (>= 0).

    K=0 is left out where two K >= 1 were measured: the step from K=0 to K=1
    also switches the drafter on, whose pass (an n-gram lookup, a draft
    model's first forward) does not depend on how many tokens it proposes,
    so it is not a cost per verified token. At a size with fewer points the
    slope of the nearest sizes that have one is used; with none anywhere, 0.
    """
    slopes: list[float | None] = []
    for bs in sizes:
        points = [
            (k, bs * column.verified[i], column.itl_ms[i])
            for k, column in columns.items()
            for i, size in enumerate(column.sizes)
            if size == bs
        ]
        speculative = [p for p in points if p[0] > 0]
        use = speculative if len({p[1] for p in speculative}) >= 2 else points
        tokens = np.array([p[1] for p in use])
        if len(use) < 2 or np.ptp(tokens) < 1e-9:
            slopes.append(None)
            continue
        slope = np.polyfit(tokens, np.array([p[2] for p in use]), 1)[0]
        slopes.append(max(float(slope), 0.0))
    known = [(bs, s) for bs, s in zip(sizes, slopes, strict=True) if s is not None]
    if not known:
        return [0.0] * len(sizes)
    xs, ys = [bs for bs, _ in known], [s for _, s in known]
    return [
        s if s is not None else float(np.interp(bs, xs, ys))
        for bs, s in zip(sizes, slopes, strict=True)
    ]
