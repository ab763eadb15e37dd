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
from typing import ClassVar

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
    ratio per observed K, plus a live cost per verified draft token, plus context.

    ITL = s_b * r_K * f(bs, K, T, c_ref) + d_b * (T - bs) + g * (C - bs * c_ref),
    with f the profile's model (``cost.StepCostModel``) at its reference
    context and T - bs the draft tokens the step verified (a sequence verifies
    one token plus its proposal). Fitted from clean decode steps by ridge
    regression, ``prior_weight`` pseudo-steps each: s_b toward a global scale
    s, s toward 1 (the profile is right), g toward the profile's context cost,
    d_b toward 0, and then r_K toward 1.

    * The scale is shared across K: a machine uniformly slower than the
      profile's is one scale that every K, observed or not, inherits, so an
      unobserved K never looks spuriously cheap or dear.
    * d_b is what verifying a draft token costs beyond the profile's price.
      A profile made on another machine class can price verification
      several times too cheap: on vLLM's CPU engine, a profile from an
      AVX-512 machine served on one without put K=3 steps that carried
      drafts at 160-320 ms against <= 80 ms for those that did not, and a
      scale (or a ratio per K) fitted to their mean says nothing of what a
      smaller K, or K=0, would cost, so the policy stayed at K=3 at 0.77x
      plain decoding. d_b is fitted from steps of one batch size that
      verified different numbers of tokens, over every K >= 1 (so that a
      batch size the profile prices wrongly does not pass for it): within one
      K where the drafter proposes fewer than K tokens, or none, at a rate
      set by the traffic (n-gram, suffix), and across K where more than one K
      ran (an EAGLE head proposes K every step: one exploration step at
      another K tells). Every K, run or not, is then priced with it, so the
      policy leaves a K that verifies too dearly for the K that is best on
      this machine. A bucket without such steps keeps the profile's price
      (d_b = 0). d_b may be negative (a machine that verifies cheaper than
      profiled), down to the point where a verified token would cost nothing.
    * r_K is what the scale and slope cannot say: that *this* K's steps run
      cheaper or dearer relative to the others than the profile measured.
    * A context shift is additive, not a factor.

    Evidence forgets with a half-life of ``half_life_steps`` timed steps *of its
    own K*, and ``SLOW_CLOCK`` times slower over all steps: a K the pod runs
    rarely (the policy's plain reference, K=0 on 0.1-1% of steps, or an
    exploration) keeps what its steps said while the K in force runs on, so a
    few dozen K=0 steps can move r_0 away from a profile that priced K=0
    wrongly. With one clock for every K they could not: a K run on a share s
    of steps is then worth s * 2,885 steps at most (29 at 1%), against the
    prior's 16, and r_0 closed under two thirds of the gap (``make
    bench-floor``'s collapse at stop 50: K=1 kept in force at 0.92x plain
    decoding, K=0 6% better). Machine drift still reaches every K: the
    shared scale follows the K in force.
    """

    SLOW_CLOCK: ClassVar[float] = 16.0
    """A K's evidence also halves every ``SLOW_CLOCK * half_life_steps`` steps of any K:
    nothing is kept for good."""

    _SUMS = (
        "n", "f1", "f2", "f3", "ms",
        "f1f1", "f1f2", "f1f3", "f1ms", "f2f2", "f2f3", "f2ms", "f3f3", "f3ms", "msms",
    )  # fmt: skip
    """The per-(batch size, K) sums kept (f1: the profile's prediction, f2: the context
    shift, f3: the draft tokens verified, ms: the step time): every fit reads them."""
    _AT: ClassVar[dict[str, int]] = {name: j for j, name in enumerate(_SUMS)}
    _X = ("f1", "f2", "f3")

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
        self.count = np.zeros(self.buckets)
        """Decayed timed steps per bucket (derived from the sums at each fold)."""
        self._xtx = np.zeros((self.buckets, 3, 3))
        self._xty = np.zeros((self.buckets, 3))
        self._yy = np.zeros(self.buckets)
        """Per bucket: X'X, X'y and y'y of X = (f1, f2, f3), y the step time (derived too)."""
        ks = sorted(self._ks)
        self._k_index = [-1] * (max(ks) + 1)
        for i, k in enumerate(ks):
            self._k_index[k] = i
        self._sums = np.zeros((max_batch_size + 1, len(ks), len(self._SUMS)))
        """Per (batch size, K): the sums named in ``_SUMS``."""
        self._size_bucket = np.asarray(self._bucket, dtype=np.intp)
        self.k_ratio = np.ones(max(ks) + 1)
        """r_K per K (1.0 for K never observed or never measured)."""
        self._pending: list[tuple[int, int, float, float, float]] = []
        self.scale = np.ones(self.buckets)
        """s_b per bucket."""
        self.draft_token_ms = np.zeros(self.buckets)
        """d_b per bucket: ms per verified draft token beyond the profile's price."""
        self.global_scale = 1.0
        self.gamma = prior.gamma
        self.residual_sd = 0.0
        self._var_scale = np.zeros(self.buckets)
        self._var_draft = np.zeros(self.buckets)
        """Posterior variances of s_b and d_b (in units of the residual variance)."""
        sizes = np.arange(1, max_batch_size + 1, dtype=np.float64)
        self._beta_floor = np.full(self.buckets, np.inf)
        """Per bucket, the profile's smallest cost per verified token (ms): d_b stays
        above minus this times s_b."""
        np.minimum.at(
            self._beta_floor,
            self._size_bucket[1:],
            np.interp(sizes, prior.beta_sizes, prior.beta),
        )
        self._beta_floor[np.isinf(self._beta_floor)] = 0.0

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
        own = np.zeros(len(self._ks))
        for _, k, _, _, _ in pending:
            own[self._k_index[k]] += 1.0
        clock = own + len(pending) / self.SLOW_CLOCK
        self._sums *= (0.5 ** (clock / self._half_life))[None, :, None]
        ref = self._reference
        for bs, k, verified, context, ms in pending:
            f1 = self.prior.itl_ms(bs, k, verified, bs * ref)
            f2 = context - bs * ref
            f3 = max(verified - bs, 0.0)
            self._sums[bs, self._k_index[k]] += (
                1.0, f1, f2, f3, ms,
                f1 * f1, f1 * f2, f1 * f3, f1 * ms, f2 * f2, f2 * f3, f2 * ms, f3 * f3, f3 * ms,
                ms * ms,
            )  # fmt: skip
        self._bucket_moments()
        for _ in range(2):  # the scales given the slopes, the slopes given the scales
            self._refit_scales()
            self._refit_draft_cost()
        self._refit_residual()
        self._refit_k_ratios()

    def _bucket_moments(self) -> None:
        """Per bucket, from the sums: the step count, X'X and X'y of X = (f1, f2, f3), y'y."""
        at, x = self._AT, self._X
        totals = np.zeros((self.buckets, len(self._SUMS)))
        np.add.at(totals, self._size_bucket, self._sums.sum(axis=1))
        self.count = totals[:, at["n"]]
        pair = [[at["".join(sorted((a, b)))] for b in x] for a in x]
        self._xtx = totals[:, pair]
        self._xty = totals[:, [at[f"{a}ms"] for a in x]]
        self._yy = totals[:, at["msms"]]

    def _refit_scales(self) -> None:
        """s, g and s_b, with the draft tokens priced at the current d_b."""
        total = float(self.count.sum())
        if total <= 0.0:
            return
        d = self.draft_token_ms
        xtx = self._xtx[:, :2, :2]
        xty = self._xty[:, :2] - d[:, None] * self._xtx[:, :2, 2]
        pooled_xtx, pooled_xty = xtx.sum(axis=0), xty.sum(axis=0)
        reg = self._weight * np.maximum(np.diag(pooled_xtx) / total, 1e-12)
        target = np.array([1.0, self.prior.gamma])
        theta = np.linalg.solve(pooled_xtx + np.diag(reg), pooled_xty + reg * target)
        self.global_scale = max(float(theta[0]), 0.05)
        self.gamma = max(float(theta[1]), 0.0)
        for b in range(self.buckets):
            n = float(self.count[b])
            if n <= 0.0:
                self.scale[b] = self.global_scale
                self._var_scale[b] = 0.0
                continue
            a = float(xtx[b][0, 0])
            y = float(xty[b][0] - xtx[b][0, 1] * self.gamma)
            reg_b = self._weight * max(a / n, 1e-12)
            self.scale[b] = max((y + reg_b * self.global_scale) / (a + reg_b), 0.05)
            self._var_scale[b] = 1.0 / (a + reg_b)

    def _refit_draft_cost(self) -> None:
        """d_b from how step time moves with the draft tokens at one batch size.

        Within each batch size, over the steps of every K >= 1 (K=0 is left out,
        as in the profile's own slope, ``cost._beta``: going from K=0 to K=1
        also switches the drafter's work on, which is not a cost per verified
        token). The tokens a step verifies vary within one K where the drafter
        proposes fewer than K (n-gram), and across K where more than one K ran.
        """
        i = self._AT
        speculative = [j for k, j in enumerate(self._k_index) if k > 0 and j >= 0]
        sums = self._sums[:, speculative, :].sum(axis=1)
        n = np.maximum(sums[:, i["n"]], 1e-12)

        def centred(x: str, y: str) -> FloatArray:
            prod = "".join(sorted((x, y))) if x != y else x + y
            result: FloatArray = sums[:, i[prod]] - sums[:, i[x]] * sums[:, i[y]] / n
            return result

        buckets = self._size_bucket
        spread = centred("f3", "f3")
        # A batch size whose steps all verified the same tokens has no spread; what the
        # subtraction leaves there is rounding, which must not pass for a slope.
        varies = spread > 1e-9 * sums[:, i["f3f3"]] + 1e-12
        per_size = np.where(
            varies,
            centred("f3", "ms")
            - self.scale[buckets] * centred("f1", "f3")
            - self.gamma * centred("f2", "f3"),
            0.0,
        )
        variance = np.bincount(buckets, np.where(varies, spread, 0.0), minlength=self.buckets)
        moved = np.bincount(buckets, per_size, minlength=self.buckets)
        steps = np.bincount(buckets, sums[:, i["n"]], minlength=self.buckets)
        known = variance > 1e-9
        # A bucket without evidence keeps the profile's price (d_b = 0): neither a cost
        # in ms fitted at another batch size (verification is ~free where decoding is
        # memory-bound and dear where it is compute-bound) nor a multiple of the
        # profile's slope (which holds an EAGLE head's K passes too) carries over.
        for b in np.flatnonzero(~known):
            self.draft_token_ms[b], self._var_draft[b] = 0.0, 0.0
        for b in np.flatnonzero(known):
            reg_b = self._weight * float(variance[b]) / float(steps[b])
            d = float(moved[b]) / (float(variance[b]) + reg_b)
            self.draft_token_ms[b] = max(d, -float(self.scale[b]) * float(self._beta_floor[b]))
            self._var_draft[b] = 1.0 / (float(variance[b]) + reg_b)

    def _refit_residual(self) -> None:
        """The residual sd of the full model (s_b, g, d_b), over every timed step."""
        sse, dof = 0.0, 0.0
        for b in range(self.buckets):
            n = float(self.count[b])
            if n <= 0.0:
                continue
            full = np.array([self.scale[b], self.gamma, self.draft_token_ms[b]])
            resid = self._yy[b] - 2 * full @ self._xty[b] + full @ self._xtx[b] @ full
            sse += max(float(resid), 0.0)
            dof += n
        self.residual_sd = math.sqrt(sse / dof) if dof > 0 else 0.0

    def _refit_k_ratios(self) -> None:
        """r_K given the scales, slopes and g: ridge toward 1, ``prior_weight`` pseudo-steps."""
        i = self._AT
        sums = self._sums
        scale = self.scale[self._size_bucket][:, None]
        a = (scale * scale * sums[:, :, i["f1f1"]]).sum(axis=0)
        residual = sums[:, :, i["f1ms"]] - self.gamma * sums[:, :, i["f1f2"]]
        residual -= self.draft_token_ms[self._size_bucket][:, None] * sums[:, :, i["f1f3"]]
        c = (scale * residual).sum(axis=0)
        n = sums[:, :, i["n"]].sum(axis=0)
        for k, j in enumerate(self._k_index):
            if j < 0 or n[j] <= 0.0:
                continue
            reg = self._weight * max(float(a[j]) / float(n[j]), 1e-12)
            ratio = (float(c[j]) + reg) / (float(a[j]) + reg)
            self.k_ratio[k] = min(max(ratio, 0.2), 5.0)

    def itl_ms(
        self, batch_size: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """The live prediction for one step."""
        bs = min(max(batch_size, 1), self.max_batch_size)
        base = self.prior.itl_ms(bs, k, verified_tokens, bs * self._reference)
        ratio = float(self.k_ratio[k]) if k < len(self.k_ratio) else 1.0
        b = self._bucket[bs]
        shift = self.gamma * (context_tokens - bs * self._reference)
        shift += float(self.draft_token_ms[b]) * max(verified_tokens - bs, 0.0)
        return max(float(self.scale[b]) * ratio * base + shift, 1e-6)

    def _base(self, verified_per_sequence: Sequence[float]) -> FloatArray:
        max_k = len(verified_per_sequence) - 1
        return self.prior.grid(self.max_batch_size, max_k, verified_per_sequence)

    def grid(
        self, verified_per_sequence: Sequence[float], context_per_sequence: float
    ) -> FloatArray:
        """Live ITL (ms), shape (max_bs + 1, len(verified_per_sequence)); NaN: K never measured."""
        base = self._base(verified_per_sequence)
        sizes = np.arange(self.max_batch_size + 1, dtype=np.float64)
        buckets = np.asarray(self._bucket, dtype=np.intp)
        scale = self.scale[buckets]
        columns = base.shape[1]
        ratio = np.ones(columns)
        known = min(columns, len(self.k_ratio))
        ratio[:known] = self.k_ratio[:known]
        shift = self.gamma * sizes * (context_per_sequence - self._reference)
        drafts = self._draft_tokens(verified_per_sequence)
        result: FloatArray = np.maximum(
            scale[:, None] * ratio[None, :] * base
            + shift[:, None]
            + self.draft_token_ms[buckets][:, None] * drafts,
            1e-6,
        )
        result[0] = np.nan
        return result

    def _draft_tokens(self, verified_per_sequence: Sequence[float]) -> FloatArray:
        """Draft tokens a step verifies per (bs, K): bs * (verified per sequence - 1)."""
        sizes = np.arange(self.max_batch_size + 1, dtype=np.float64)
        per_sequence = np.maximum(np.asarray(verified_per_sequence, dtype=np.float64) - 1.0, 0.0)
        result: FloatArray = sizes[:, None] * per_sequence[None, :]
        return result

    def sd_grid(self, verified_per_sequence: Sequence[float]) -> FloatArray:
        """Standard error of the live prediction per (bs, K), from the posterior variances
        of the bucket's scale and draft-token cost; 10% of the prediction where unobserved."""
        base = np.nan_to_num(self._base(verified_per_sequence))
        drafts = self._draft_tokens(verified_per_sequence)
        buckets = np.asarray(self._bucket, dtype=np.intp)
        unit = max(self.residual_sd, 1e-9) ** 2
        variance = unit * (
            self._var_scale[buckets][:, None] * base * base
            + self._var_draft[buckets][:, None] * drafts * drafts
        )
        observed = (self.count[buckets] > 0)[:, None]
        result: FloatArray = np.where(observed, np.sqrt(np.maximum(variance, 0.0)), 0.1 * base)
        return result

    def correction(
        self, batch_size: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """Live prediction over the profile's, for one step (1.0: the profile as is)."""
        prior = self.prior.itl_ms(batch_size, k, verified_tokens, context_tokens)
        return self.itl_ms(batch_size, k, verified_tokens, context_tokens) / max(prior, 1e-9)
