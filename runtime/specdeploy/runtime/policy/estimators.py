"""Live estimators behind the adaptive policy: acceptance per position, step-time corrections.

DESIGN.md's merge rule: acceptance depends on the workload, so it comes from
live traffic with the profile as a prior; step cost depends on the hardware,
so it comes from the profile, corrected by live step timings.

Both estimators split their work in two. ``add`` runs once per engine step
and only adds numbers into preallocated Python lists (no numpy, no
allocation). ``fold`` runs every few dozen steps: it forgets old evidence
exponentially (a half-life in steps, so drift is followed) and moves the
pending sums into numpy arrays, from which estimates are computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specdeploy.runtime.goodput import FloatArray

_EPS = 1e-3
"""Rates are clipped to [EPS, 1 - EPS] before taking log-odds."""

_TINY = 1e-300
"""Floor of a denominator that is 0 exactly when its numerator is."""


def _logit(p: float) -> float:
    q = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(q / (1.0 - q))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _decay(half_life_steps: float, steps: int) -> float:
    """Weight left to evidence that is ``steps`` steps old."""
    return float(0.5 ** (steps / half_life_steps))


class AcceptanceEstimator:
    """Conditional acceptance a_i per draft position from decayed live counts.

    Estimate: (accepted_i + w * target_i) / (drafted_i + w), where w > 0 is
    the prior's pseudo-count and target_i is the profile's a_i, optionally
    shifted in log-odds by the drift seen on the positions that were observed
    (``share_drift``). A position never observed therefore falls back on the
    (shifted) prior, and with no live data at all the estimate is the prior.
    Plain Python floats: there are at most a dozen or so positions, too few
    for numpy to pay off.
    """

    def __init__(
        self,
        prior: Sequence[float],
        *,
        prior_weight: float,
        half_life_tokens: float,
        half_life_steps: float,
        share_drift: bool,
    ) -> None:
        self.prior = [float(p) for p in prior]
        self.positions = len(self.prior)
        self._weight = prior_weight
        self._half_life_tokens = half_life_tokens
        self._half_life_steps = half_life_steps
        self._share_drift = share_drift
        self._prior_logit = [_logit(p) for p in self.prior]
        self.drafted = [0.0] * self.positions
        self.accepted = [0.0] * self.positions
        self._pending_drafted = [0] * self.positions
        self._pending_accepted = [0] * self.positions

    def add(self, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        """One step's per-position counts (correct denominators, see ``policy.base``)."""
        if len(drafted) > self.positions:  # never from a well-behaved engine
            drafted = drafted[: self.positions]
        pending_d = self._pending_drafted
        pending_a = self._pending_accepted
        for i, (d, a) in enumerate(zip(drafted, accepted)):  # noqa: B905 (stop at the shorter)
            pending_d[i] += d
            pending_a[i] += a

    def fold(self, steps: int) -> None:
        """Forget old evidence, then take the pending counts in.

        Each position forgets by both clocks: half its evidence per
        ``half_life_tokens`` new drafts at that position (so the estimate
        keeps a roughly constant number of samples, and follows drift faster
        the more traffic there is) and per ``half_life_steps`` steps (so a
        position the current K no longer drafts cannot keep a stale estimate
        for ever: it drifts back to the shifted prior).
        """
        per_step = steps / self._half_life_steps
        keep = [0.5 ** (per_step + new / self._half_life_tokens) for new in self._pending_drafted]
        self.drafted = [
            old * k + new
            for old, k, new in zip(self.drafted, keep, self._pending_drafted, strict=True)
        ]
        self.accepted = [
            old * k + new
            for old, k, new in zip(self.accepted, keep, self._pending_accepted, strict=True)
        ]
        self._pending_drafted = [0] * self.positions
        self._pending_accepted = [0] * self.positions

    def drift(self) -> float:
        """Mean log-odds shift of observed positions from the prior, shrunk toward 0.

        Weighted by each position's (decayed) draft count, with the prior's
        pseudo-count on the side of "no drift", so a handful of drafts cannot
        move the prior of unobserved positions far.
        """
        if not self._share_drift:
            return 0.0
        total, weights = 0.0, self._weight
        for d, a, base in zip(self.drafted, self.accepted, self._prior_logit, strict=True):
            if d > 0.0:
                total += d * (_logit(a / d) - base)
                weights += d
        return total / weights

    def target(self) -> list[float]:
        """The prior each position is shrunk toward: the profile's, shifted by the drift."""
        shift = self.drift()
        if shift == 0.0:
            return list(self.prior)
        return [_sigmoid(base + shift) for base in self._prior_logit]

    def estimate(self) -> list[float]:
        """Current a_i for every position, in [0, 1]."""
        w = self._weight
        rows = zip(self.accepted, self.drafted, self.target(), strict=True)
        return [min(max((a + w * t) / (d + w), 0.0), 1.0) for a, d, t in rows]


# --- step-time corrections -------------------------------------------------


def bucket_of(batch_size: int) -> int:
    """Power-of-two batch-size bucket: 1 | 2 | 3-4 | 5-8 | 9-16 | ..."""
    return (batch_size - 1).bit_length()


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """Inclusive batch-size range of a bucket."""
    if bucket == 0:
        return 1, 1
    return (1 << (bucket - 1)) + 1, 1 << bucket


def _shrink(
    observed: FloatArray,
    predicted: FloatArray,
    count: FloatArray,
    target: FloatArray,
    weight: float,
) -> FloatArray:
    """Ratio observed/predicted, pulled toward ``target`` with ``weight`` (> 0) pseudo-steps.

    Where nothing was observed all three sums are 0, so the ratio term
    vanishes and the result is ``target`` (no division by zero: ``predicted``
    is floored, and ``count + weight`` > 0).
    """
    ratio = observed / np.maximum(predicted, _TINY)
    result: FloatArray = (count * ratio + weight * target) / (count + weight)
    return result


def _neighbours(values: FloatArray) -> FloatArray:
    """For each bucket, the sum over the buckets just below and just above."""
    result = np.zeros_like(values)
    result[1:] += values[:-1]
    result[:-1] += values[1:]
    return result


class ItlCorrector:
    """Multiplicative step-time corrections per (batch-size bucket, K).

    A cell's factor is its own observed/predicted ratio (ratio of decayed
    sums), shrunk toward the ratio of the neighbouring buckets at the same
    K, which is shrunk toward the ratio of that K over all buckets, which is
    shrunk toward ``global ** global_share``, the global ratio (itself
    shrunk toward 1, the profile) partly pooled. A cell never observed thus
    inherits the nearest evidence.

    Why only part of the global ratio: a deviation seen at one K is in part
    the machine's (every K slows down) and in part that K's own (its drafter
    or verify shape costs more than profiled); the evidence of one K cannot
    tell the two apart. In a model log f = g + u_K with equal prior
    variances, an unobserved K gets half the observed log-deviation
    (share 0.5). Taking all of it would freeze the profile's ranking of K
    (a K that is truly cheaper would never look so); taking none would
    make every unobserved K look better whenever the machine is slow.
    Factors, and each single step's ratio, are clipped to bounds.
    """

    def __init__(
        self,
        predicted_ms: FloatArray,
        *,
        prior_weight: float,
        half_life_steps: float,
        bounds: tuple[float, float],
        global_share: float,
    ) -> None:
        rows, self.columns = predicted_ms.shape
        self.max_batch_size = rows - 1
        self._bucket = [0] + [bucket_of(bs) for bs in range(1, rows)]
        self._bucket_index = np.asarray(self._bucket, dtype=np.intp)
        self.buckets = self._bucket[-1] + 1
        # NaN (unavailable) becomes 0.0 so that the per-step test is one compare.
        self._predicted: list[list[float]] = np.nan_to_num(predicted_ms, nan=0.0).tolist()
        self._weight = prior_weight
        self._half_life = half_life_steps
        self._low, self._high = bounds
        self._global_share = global_share
        shape = (self.buckets, self.columns)
        self.observed: FloatArray = np.zeros(shape)
        self.predicted: FloatArray = np.zeros(shape)
        self.count: FloatArray = np.zeros(shape)
        self._reset_pending()

    def _reset_pending(self) -> None:
        cells = self.buckets * self.columns
        self._pending_observed = [0.0] * cells
        self._pending_predicted = [0.0] * cells
        self._pending_count = [0] * cells

    def add(self, batch_size: int, k: int, step_ms: float) -> None:
        """One timed step; ignored where the profile has no prediction to compare with."""
        if batch_size > self.max_batch_size:
            batch_size = self.max_batch_size
        if batch_size < 1 or not 0 <= k < self.columns or not step_ms > 0.0:
            return
        predicted = self._predicted[batch_size][k]
        if predicted <= 0.0:
            return
        low = predicted * self._low
        high = predicted * self._high
        step_ms = low if step_ms < low else high if step_ms > high else step_ms
        cell = self._bucket[batch_size] * self.columns + k
        self._pending_observed[cell] += step_ms
        self._pending_predicted[cell] += predicted
        self._pending_count[cell] += 1

    def fold(self, steps: int) -> None:
        """Forget ``steps`` steps' worth of old evidence, then take the pending sums in."""
        keep = _decay(self._half_life, steps)
        shape = (self.buckets, self.columns)
        pending = (self._pending_observed, self._pending_predicted, self._pending_count)
        self.observed, self.predicted, self.count = (
            old * keep + np.asarray(new, dtype=np.float64).reshape(shape)
            for old, new in zip((self.observed, self.predicted, self.count), pending, strict=True)
        )
        self._reset_pending()

    def global_factor(self) -> float:
        """All evidence pooled, shrunk toward 1.0 (the profile is right)."""
        observed, predicted = float(self.observed.sum()), float(self.predicted.sum())
        count = float(self.count.sum())
        ratio = observed / predicted if predicted > 0 else 1.0
        return (count * ratio + self._weight) / (count + self._weight)

    def factors(self) -> FloatArray:
        """Correction per (bucket, K), shape (buckets, columns), within the bounds."""
        w = self._weight
        obs, pred, n = self.observed, self.predicted, self.count
        glob = np.full(self.columns, self.global_factor() ** self._global_share)
        per_k = _shrink(obs.sum(axis=0), pred.sum(axis=0), n.sum(axis=0), glob, w)
        near = _shrink(_neighbours(obs), _neighbours(pred), _neighbours(n), per_k, w)
        cell = _shrink(obs, pred, n, near, w)
        result: FloatArray = np.clip(cell, self._low, self._high)
        return result

    def per_batch_size(self, factors: FloatArray) -> FloatArray:
        """Bucket factors spread to every batch size, shape (max_bs + 1, columns)."""
        result: FloatArray = factors[self._bucket_index]
        return result
