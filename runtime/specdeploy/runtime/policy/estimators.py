"""Live estimators behind the adaptive policy: acceptance, proposal lengths, step cost.

DESIGN.md's merge rule: acceptance depends on the workload, so it comes from
live traffic with the profile as a prior; step cost depends on the hardware,
so it comes from the profile's cost model (``cost.py``), corrected by live
step timings.

Every estimator splits its work in two. ``add`` runs once per engine step
and only adds numbers into preallocated Python lists (no numpy, no
allocation). ``fold`` runs every few dozen steps: it forgets old evidence
and moves the pending sums into the estimates.

Forgetting is by evidence, not by the clock: a position the current K no
longer drafts keeps its last estimate (it does not drift back to the
profile), and its *uncertainty* grows with the steps since it was seen (a
random walk of ``drift_per_step`` variance per step): exploration, driven by
that uncertainty, decides when to look again. A sudden change (an acceptance
collapse) is caught by a change test at every fold: a batch of new evidence that contradicts the
estimate beyond ``change_z`` standard errors replaces the old evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specdeploy.runtime.contract import bucket_of
from specdeploy.runtime.cost import StepCostModel
from specdeploy.runtime.goodput import FloatArray

_EPS = 1e-3
"""Rates are clipped to [EPS, 1 - EPS] before taking log-odds."""


def _logit(p: float) -> float:
    q = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(q / (1.0 - q))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class RateEstimator:
    """Per-position rates (successes / trials) from forgetting counts, a prior and a change test.

    Estimate: (successes_i + w * target_i) / (trials_i + w), with w the
    prior's pseudo-count and target_i the prior, shifted in log-odds by the
    drift seen on the observed positions when ``share_drift`` (so positions
    beyond the K in use follow what the observed ones say, instead of luring
    the policy back up with the profile's optimism). Counts forget by
    evidence: half their weight per ``half_life`` new trials at that
    position. ``variance`` is the estimate's (Beta) variance plus
    ``drift_per_step`` per step since the position was last observed, which
    is what exploration reads.
    """

    def __init__(
        self,
        prior: Sequence[float],
        *,
        prior_weight: float,
        half_life: float,
        change_z: float,
        drift_per_step: float,
        share_drift: bool = False,
    ) -> None:
        self.prior = [min(max(float(p), 0.0), 1.0) for p in prior]
        self.positions = len(self.prior)
        self._weight = prior_weight
        self._half_life = half_life
        self._change_z = change_z
        self._drift_per_step = drift_per_step
        self._share_drift = share_drift
        self._prior_logit = [_logit(p) for p in self.prior]
        self.trials = [0.0] * self.positions
        self.successes = [0.0] * self.positions
        self.age = [1 << 30] * self.positions
        """Steps since each position was last observed (large: never)."""
        self.changes = 0
        """How many times the change test replaced old evidence."""
        self._pending_trials = [0] * self.positions
        self._pending_successes = [0] * self.positions

    def add(self, trials: Sequence[int], successes: Sequence[int]) -> None:
        """One step's counts per position."""
        pt, ps = self._pending_trials, self._pending_successes
        n = min(len(trials), len(successes), self.positions)
        for i in range(n):
            pt[i] += trials[i]
            ps[i] += successes[i]

    def fold(self, steps: int) -> None:
        """Take the pending counts in: change test, forgetting, ages."""
        for i in range(self.positions):
            new_t, new_s = self._pending_trials[i], self._pending_successes[i]
            if new_t == 0:
                self.age[i] += steps
                continue
            self.age[i] = 0
            old_t, old_s = self.trials[i], self.successes[i]
            if old_t > 0 and self._changed(old_s, old_t, new_s, new_t):
                old_t, old_s = 0.0, 0.0  # the old evidence describes another workload
                self.changes += 1
            keep = 0.5 ** (new_t / self._half_life)
            self.trials[i] = old_t * keep + new_t
            self.successes[i] = old_s * keep + new_s
        self._pending_trials = [0] * self.positions
        self._pending_successes = [0] * self.positions

    def _changed(self, old_s: float, old_t: float, new_s: int, new_t: int) -> bool:
        """Whether the new batch contradicts the old rate beyond ``change_z`` standard errors."""
        p_old = old_s / old_t
        p_new = new_s / new_t
        pooled = (old_s + new_s) / (old_t + new_t)
        se = math.sqrt(max(pooled * (1.0 - pooled), 1e-4) * (1.0 / old_t + 1.0 / new_t))
        return abs(p_new - p_old) > self._change_z * se

    def drift(self) -> float:
        """Mean log-odds shift of observed positions from the prior, shrunk toward 0."""
        if not self._share_drift:
            return 0.0
        total, weights = 0.0, self._weight
        for s, t, base in zip(self.successes, self.trials, self._prior_logit, strict=True):
            if t > 0.0:
                total += t * (_logit(s / t) - base)
                weights += t
        return total / weights

    def target(self) -> list[float]:
        """The prior each position is shrunk toward: the profile's, shifted by the drift."""
        shift = self.drift()
        if shift == 0.0:
            return list(self.prior)
        return [_sigmoid(base + shift) for base in self._prior_logit]

    def estimate(self) -> list[float]:
        """Current rate per position, in [0, 1]."""
        w = self._weight
        return [
            min(max((s + w * p) / (t + w), 0.0), 1.0)
            for s, t, p in zip(self.successes, self.trials, self.target(), strict=True)
        ]

    def variance(self) -> list[float]:
        """The estimate's variance plus the drift of the steps it went unobserved."""
        w = self._weight
        out = []
        for rate, t, age in zip(self.estimate(), self.trials, self.age, strict=True):
            base = rate * (1.0 - rate) / (t + w + 1.0)
            out.append(min(base + self._drift_per_step * min(age, 1 << 20), 0.25))
        return out

    def evidence(self) -> list[float]:
        """Decayed trials per position (the estimate's evidence)."""
        return list(self.trials)


class CostEstimator:
    """Live step cost: the profile's model times a scale per batch-size bucket and a
    ratio per observed K, plus context.

    ITL = s_b * r_K * f(bs, K, T, c_ref) + g * (C - bs * c_ref), with f the
    profile's model (``cost.StepCostModel``) at its reference context, fitted
    by ridge regression from clean decode steps: s_b toward a global scale s,
    s toward 1 (the profile is right), g toward the profile's context cost,
    and then r_K toward 1, with ``prior_weight`` pseudo-steps each. The scale
    is shared across K: a machine uniformly slower than the profile's is one
    scale that every K, observed or not, inherits, so an unobserved K never
    looks spuriously cheap or dear (its r_K stays 1). r_K is what the shared
    scale cannot say: that *this* K's steps run cheaper or dearer relative to
    the others than the profile measured (on vLLM's CPU server a K=3 step
    whose drafter found nothing cost what a K=0 step did, while the shipped
    profile priced it 28% dearer; with one scale the policy sat at K=0 and
    lost 10% to the table). A context shift is additive, not a factor.
    Evidence forgets with a half-life of ``half_life_steps`` timed steps.
    """

    def __init__(
        self,
        prior: StepCostModel,
        *,
        max_batch_size: int,
        prior_weight: float,
        half_life_steps: float,
    ) -> None:
        self.prior = prior
        self.max_batch_size = max_batch_size
        self._bucket = [0] + [bucket_of(bs) for bs in range(1, max_batch_size + 1)]
        self.buckets = self._bucket[-1] + 1
        self._weight = prior_weight
        self._half_life = half_life_steps
        self._reference = prior.reference_context
        self._ks = frozenset(prior.ks)
        self._xtx = np.zeros((self.buckets, 2, 2))
        self._xty = np.zeros((self.buckets, 2))
        self._yy = np.zeros(self.buckets)
        self.count = np.zeros(self.buckets)
        ks = sorted(self._ks)
        self._k_index = [-1] * (max(ks) + 1)
        for i, k in enumerate(ks):
            self._k_index[k] = i
        self._k_sums = np.zeros((self.buckets, len(ks), 4))
        """Per (bucket, K): sums of f1^2, f1 * ms, f1 * f2 and the step count (r_K's fit)."""
        self.k_ratio = np.ones(max(ks) + 1)
        """r_K per K (1.0 for K never observed or never measured)."""
        self._pending: list[tuple[int, int, float, float, float]] = []
        self.scale = np.ones(self.buckets)
        """s_b per bucket."""
        self.global_scale = 1.0
        self.gamma = prior.gamma
        self.residual_sd = 0.0
        self._var = np.zeros(self.buckets)
        """Posterior variance of s_b (in units of the residual variance)."""

    def add(
        self, batch_size: int, k: int, verified_tokens: int, context_tokens: int, ms: float
    ) -> None:
        """One clean decode step's time (the profile's prediction is computed at fold time)."""
        if ms > 0.0 and batch_size >= 1 and k in self._ks:
            bs = batch_size if batch_size <= self.max_batch_size else self.max_batch_size
            self._pending.append((bs, k, float(verified_tokens), float(context_tokens), ms))

    def fold(self) -> None:
        """Forget, take the pending steps in, and refit."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        keep = 0.5 ** (len(pending) / self._half_life)
        self._xtx *= keep
        self._xty *= keep
        self._yy *= keep
        self.count *= keep
        self._k_sums *= keep
        ref = self._reference
        for bs, k, verified, context, ms in pending:
            f1 = self.prior.itl_ms(bs, k, verified, bs * ref)
            f2 = context - bs * ref
            b = self._bucket[bs]
            self._xtx[b] += ((f1 * f1, f1 * f2), (f1 * f2, f2 * f2))
            self._xty[b] += (f1 * ms, f2 * ms)
            self._yy[b] += ms * ms
            self.count[b] += 1.0
            self._k_sums[b, self._k_index[k]] += (f1 * f1, f1 * ms, f1 * f2, 1.0)
        self._refit()
        self._refit_k_ratios()

    def _refit(self) -> None:
        total = float(self.count.sum())
        if total <= 0.0:
            return
        xtx, xty = self._xtx.sum(axis=0), self._xty.sum(axis=0)
        reg = self._weight * np.maximum(np.diag(xtx) / total, 1e-12)
        target = np.array([1.0, self.prior.gamma])
        theta = np.linalg.solve(xtx + np.diag(reg), xty + reg * target)
        self.global_scale = max(float(theta[0]), 0.05)
        self.gamma = max(float(theta[1]), 0.0)
        sse, dof = 0.0, 0.0
        for b in range(self.buckets):
            n = float(self.count[b])
            if n <= 0.0:
                self.scale[b] = self.global_scale
                self._var[b] = 0.0
                continue
            a = float(self._xtx[b][0, 0])
            y = float(self._xty[b][0] - self._xtx[b][0, 1] * self.gamma)
            reg_b = self._weight * max(a / n, 1e-12)
            s = (y + reg_b * self.global_scale) / (a + reg_b)
            self.scale[b] = max(s, 0.05)
            full = np.array([s, self.gamma])
            resid = self._yy[b] - 2 * full @ self._xty[b] + full @ self._xtx[b] @ full
            sse += max(float(resid), 0.0)
            dof += n
            self._var[b] = 1.0 / (a + reg_b)
        self.residual_sd = math.sqrt(sse / dof) if dof > 0 else 0.0

    def _refit_k_ratios(self) -> None:
        """r_K given the scales and g: ridge toward 1, ``prior_weight`` pseudo-steps."""
        scale = self.scale[:, None]
        a = (scale * scale * self._k_sums[:, :, 0]).sum(axis=0)
        c = (scale * (self._k_sums[:, :, 1] - self.gamma * self._k_sums[:, :, 2])).sum(axis=0)
        n = self._k_sums[:, :, 3].sum(axis=0)
        for k, i in enumerate(self._k_index):
            if i < 0 or n[i] <= 0.0:
                continue
            reg = self._weight * max(float(a[i]) / float(n[i]), 1e-12)
            ratio = (float(c[i]) + reg) / (float(a[i]) + reg)
            self.k_ratio[k] = min(max(ratio, 0.2), 5.0)

    def itl_ms(
        self, batch_size: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """The live prediction for one step."""
        bs = min(max(batch_size, 1), self.max_batch_size)
        base = self.prior.itl_ms(bs, k, verified_tokens, bs * self._reference)
        ratio = float(self.k_ratio[k]) if k < len(self.k_ratio) else 1.0
        shift = self.gamma * (context_tokens - bs * self._reference)
        return max(float(self.scale[self._bucket[bs]]) * ratio * base + shift, 1e-6)

    def _base(self, verified_per_sequence: Sequence[float]) -> FloatArray:
        max_k = len(verified_per_sequence) - 1
        return self.prior.grid(self.max_batch_size, max_k, verified_per_sequence)

    def grid(
        self, verified_per_sequence: Sequence[float], context_per_sequence: float
    ) -> FloatArray:
        """Live ITL (ms), shape (max_bs + 1, len(verified_per_sequence)); NaN: K never measured."""
        base = self._base(verified_per_sequence)
        sizes = np.arange(self.max_batch_size + 1, dtype=np.float64)
        scale = self.scale[np.asarray(self._bucket, dtype=np.intp)]
        columns = base.shape[1]
        ratio = np.ones(columns)
        known = min(columns, len(self.k_ratio))
        ratio[:known] = self.k_ratio[:known]
        shift = self.gamma * sizes * (context_per_sequence - self._reference)
        result: FloatArray = np.maximum(
            scale[:, None] * ratio[None, :] * base + shift[:, None], 1e-6
        )
        result[0] = np.nan
        return result

    def sd_grid(self, verified_per_sequence: Sequence[float]) -> FloatArray:
        """Standard error of the live prediction per (bs, K): the scale's, 10% where unobserved."""
        base = self._base(verified_per_sequence)
        buckets = np.asarray(self._bucket, dtype=np.intp)
        observed = self.count[buckets] > 0
        scale_sd = np.where(
            observed, np.sqrt(self._var[buckets]) * max(self.residual_sd, 1e-9), 0.1
        )
        result: FloatArray = np.nan_to_num(scale_sd[:, None] * base)
        return result

    def correction(
        self, batch_size: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """Live prediction over the profile's, for one step (1.0: the profile as is)."""
        prior = self.prior.itl_ms(batch_size, k, verified_tokens, context_tokens)
        return self.itl_ms(batch_size, k, verified_tokens, context_tokens) / max(prior, 1e-9)
