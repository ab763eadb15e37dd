"""The adaptive K policy: goodput from live acceptance, live proposal lengths and a live cost model.

What it predicts, per batch size and K (DESIGN.md, "The math"):

* AL(K) from the live acceptance a_i, where a position the drafter did not
  propose counts as rejected (so AL is the realized tokens per step);
* ITL(bs, K) from the step-cost model (``cost.py``): the tokens verified
  (1 + the live expected proposal length, not K) and the live context,
  priced by the profile's model with live scales per batch-size bucket, a
  live cost per verified draft token and a live context term
  (``estimators.CostEstimator``).

What it maximises (``AdaptiveConfig.objective``): ``latency`` (default), the
per-step AL / ITL (per-request TPOT, a draining batch, open-loop serving), or
``throughput``, the Dinkelbach form bs * AL(K) - lambda * ITL(bs, K) with
lambda the system's observed tokens/s (throughput-optimal in a saturated
closed loop whose batch sizes alternate; the per-step ratio in steady state).

Two speeds:

* per step (``choose_k``): one EMA update of the batch size, list lookups,
  compares. No numpy, no allocation, no device sync. A move to K=0 happens
  as soon as K=0 is predicted at least as good (K=0 is the floor the pod can
  always run: no margin, no dwell); a move to another K >= 1 needs the
  ``switch_margin`` and waits out ``min_dwell_steps``. When the last rebuild
  found a K whose optimistic goodput (``explore_z`` standard errors better)
  beats the current K's estimate, one step runs it (exploration), within
  ``explore_budget`` of all steps.
* the plain reference: while a K >= 1 is in force, a run of
  ``plain_reference_run`` K=0 steps every so many steps, so that every pod
  keeps timing plain decoding (with the add-on's plugin a K=0 step is one),
  for K=0's price here and the operator's live floor. As often as
  ``plain_reference_cost`` of the predicted throughput allows, at most
  ``plain_reference_share`` of steps (planned at each rebuild). A countdown:
  one decrement and one compare per step.
* every ``recompute_interval`` observed steps (``refresh``): fold the live
  counts into the estimators (a change test catches a collapse at once) and
  rebuild the dense tables as Python lists.

Plain decoding (no speculation configured) is not a K a running pod can
choose, but the policy prices it from the profile's baseline and reports
the gain over it (``gain_over_vanilla``): the operator decides a restart
without speculation from that. Not thread-safe: vLLM's scheduler calls both
methods from one thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.contract import bucket_bounds
from specdeploy.runtime.cost import Cell, StepCostModel
from specdeploy.runtime.goodput import acceptance_lengths, verified_per_sequence
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.policy.config import AdaptiveConfig
from specdeploy.runtime.policy.estimators import CostEstimator, RateEstimator
from specdeploy.runtime.policy.inputs import (
    checked_allowed,
    checked_fallback,
    checked_grid,
    checked_prior,
    checked_rows,
)
from specdeploy.runtime.policy.report import KEstimate, PolicyEstimates
from specdeploy.runtime.policy.static import profile_spec, static_lookup
from specdeploy.runtime.profile import ProfileSpec, SpeculationProfile
from specdeploy.runtime.schedule import cost_model, itl_grid, k_values, proposal_survival

_UNAVAILABLE = -1e300
"""Score (and bar) of a K not available at a batch size."""
EXPLORE_RETRIES = 8
"""Consecutive steps an exploration may repeat while its steps carry a prefill (untimed)."""


def cost_from_grid(itl_ms: npt.NDArray[np.float64]) -> StepCostModel:
    """A cost model from a dense ITL grid (every finite cell, K + 1 tokens verified)."""
    cells = [
        Cell(batch_size=bs, k=k, itl_ms=float(itl_ms[bs, k]), verified_per_sequence=1.0 + k,
             context_per_sequence=0.0)
        for bs in range(1, itl_ms.shape[0])
        for k in range(itl_ms.shape[1])
        if np.isfinite(itl_ms[bs, k])
    ]  # fmt: skip
    return StepCostModel.fit(cells)


class AdaptivePolicy:
    """Chooses K per step to maximise the objective, without thrashing (module docstring).

    ``cost`` is the profile's step-cost model; ``prior`` its acceptance per
    position; ``survival`` P(proposal length >= i) per position (EAGLE and
    draft models: 1.0). ``allowed_k`` are the K the engine may run (those
    measured; CUDA graphs exist for them only). ``fallback`` (a dense lookup
    like vLLM's) is what ``choose_k`` returns while ``enabled`` is False, by
    default the policy's own first table. Without ``cost``, it is fitted from
    ``itl_ms``, a dense step-time grid (the older way of building the policy).
    """

    name = "adaptive"

    def __init__(
        self,
        itl_ms: npt.ArrayLike | None,
        prior: Sequence[float],
        *,
        cost: StepCostModel | None = None,
        max_batch_size: int | None = None,
        survival: Sequence[float] | None = None,
        allowed_k: Sequence[int] | None = None,
        fallback: Sequence[int] | None = None,
        config: AdaptiveConfig | None = None,
        available: npt.ArrayLike | None = None,
    ) -> None:
        cfg = config if config is not None else AdaptiveConfig()
        if itl_ms is not None:
            grid = checked_grid(itl_ms)
            allowed = checked_allowed(allowed_k, grid)
            checked_rows(grid, allowed)
            cost = cost if cost is not None else cost_from_grid(grid)
            rows = int(grid.shape[0]) - 1
            columns = int(grid.shape[1])
            cells = np.isfinite(grid)
        else:
            if cost is None or max_batch_size is None or allowed_k is None:
                raise ValueError("cost, max_batch_size and allowed_k: required without itl_ms")
            rows = max_batch_size
            columns = max(allowed_k) + 1
            allowed = tuple(sorted(set(allowed_k)))
            cells = np.ones((rows + 1, columns), dtype=bool)
        if available is not None:
            cells = cells & np.asarray(available, dtype=bool)
        rates = checked_prior(prior, allowed)
        self.config = cfg
        self.allowed_k = allowed
        self.max_batch_size: int = rows
        self.max_k = columns - 1
        self.enabled = True
        self.cost_prior = cost
        self._sizes = np.arange(rows + 1, dtype=np.float64)
        usable = np.zeros(columns, dtype=bool)
        usable[list(allowed)] = True
        self._usable = cells & usable[None, :]
        self._usable[0] = self._usable[1]
        positions = max(self.max_k, 1)
        survival_prior = list(survival) if survival is not None else [1.0] * positions
        survival_prior = (
            survival_prior + [survival_prior[-1] if survival_prior else 1.0] * positions
        )[:positions]
        self._acceptance = RateEstimator(
            (list(rates) + [0.0] * positions)[:positions],
            prior_weight=cfg.acceptance_prior_weight,
            half_life=cfg.acceptance_half_life_tokens,
            change_z=cfg.change_z,
            drift_per_step=cfg.acceptance_drift_per_step,
            share_drift=True,
        )
        self._survival = RateEstimator(
            survival_prior,
            prior_weight=cfg.acceptance_prior_weight,
            half_life=cfg.acceptance_half_life_tokens,
            change_z=cfg.change_z,
            drift_per_step=0.0,
        )
        self._drafting = RateEstimator(
            [1.0] * positions,
            prior_weight=1.0,
            half_life=cfg.acceptance_half_life_tokens,
            change_z=cfg.change_z,
            drift_per_step=0.0,
        )
        self._cost = CostEstimator(
            cost,
            max_batch_size=rows,
            prior_weight=cfg.cost_prior_weight,
            half_life_steps=cfg.cost_half_life_steps,
        )
        self._context = cost.reference_context
        self._context_seen = 0.0
        self._throughput = 0.0
        self._throughput_weight = 0.0
        self.generation = 0
        self._k, self._bs_ema, self._tick, self.exploration_steps = -1, -1.0, 0, 0
        self._reference_period = self._reference_due = 0
        self._rebuild()
        self._fallback = (
            list(self._best_k) if fallback is None else checked_fallback(fallback, allowed)
        )
        self._init_step_state()

    def _init_step_state(self) -> None:
        """Per-step state, read and written on the hot path."""
        cfg = self.config
        self._alpha = cfg.bs_smoothing
        self._dwell = cfg.min_dwell_steps
        self._recompute_interval = cfg.recompute_interval
        self._fallback_last = len(self._fallback) - 1
        self._bs_ema = -1.0  # < 0: no step yet
        self._k = -1  # set on the first step
        self._tick = 0
        self._dwell_until = 0
        self._pending_steps = 0
        self._explore_k = -1
        self._exploring = -1
        self._explore_retries = 0
        self.switches = 0
        self.exploration_steps = 0
        self._reference_period = 0
        """Steps from one reference run's start to the next (0: no reference runs); planned
        at each rebuild (``_plan_reference``)."""
        self._reference_due = 0
        self._reference_left = 0
        self.plain_reference_steps = 0

    @classmethod
    def from_profile(
        cls,
        profile: SpeculationProfile | ProfileSpec,
        config: AdaptiveConfig | None = None,
        *,
        max_batch_size: int | None = None,
        allowed_k: Sequence[int] | None = None,
        fallback: Sequence[int] | None = None,
    ) -> AdaptivePolicy:
        """From a profile: its cost model, acceptance, proposal survival and measured K."""
        spec = profile_spec(profile)
        rows = max_batch_size or max(m.batch_size for m in spec.measurements)
        measured = k_values(spec)
        allowed = measured if allowed_k is None else tuple(k for k in allowed_k if k in measured)
        if not allowed:
            raise ValueError(f"allowed_k: none of {list(allowed_k or [])} was measured")
        available = np.isfinite(itl_grid(spec, rows))[:, : max(allowed) + 1]
        return cls(
            None,
            spec.acceptance.per_position,
            cost=cost_model(spec),
            max_batch_size=rows,
            survival=proposal_survival(spec),
            allowed_k=allowed,
            fallback=static_lookup(spec, rows) if fallback is None else fallback,
            config=config,
            available=available,
        )

    # --- hot path ------------------------------------------------------------

    def choose_k(self, batch_size: int) -> int:
        """K for this step. O(1): an EMA, list lookups, compares."""
        if not self.enabled:
            return self._fallback_k(batch_size)
        s = self._bs_ema
        if s < 0.0:
            s = self._first_step(batch_size)
        else:
            s += self._alpha * (batch_size - s)
        self._bs_ema = s
        i = int(s + 0.5)
        if i > self.max_batch_size:
            i = self.max_batch_size
        elif i < 1:
            i = 1
        tick = self._tick + 1
        self._tick = tick
        if self._reference_left > 0:
            self._reference_left -= 1
            self.plain_reference_steps += 1
            return 0
        explore = self._explore_k
        if explore >= 0:
            self._explore_k = -1
            self._exploring = explore
            self.exploration_steps += 1
            return explore
        cur = self._k
        due = self._reference_due - 1
        self._reference_due = due
        if due <= 0 and self._reference_period:
            self._reference_due = self._reference_period
            if cur > 0 and self._score[i][0] > _UNAVAILABLE:
                self._reference_left = self.config.plain_reference_run - 1
                self.plain_reference_steps += 1
                return 0
        best = self._best_k[i]
        if best != cur:
            row = self._score[i]
            if best == 0:
                if row[0] >= row[cur]:
                    return self._switch(0, tick)
            elif row[best] > self._bar[i][cur] and (
                cur == 0 or tick >= self._dwell_until or row[cur] <= _UNAVAILABLE
            ):
                return self._switch(best, tick)
        return cur

    def _switch(self, k: int, tick: int) -> int:
        self._k = k
        self._dwell_until = tick + self._dwell
        self.switches += 1
        return k

    def observe(self, step: StepRecord) -> None:
        """Take one finished step in; rebuild the table every ``recompute_interval`` steps."""
        if step.k > 0:
            self._acceptance.add(step.reached, step.accepted)
            self._drafting.add(step.reached, step.proposed)
            self._survival.add(step.scheduled, step.offered)
        seconds = step.step_seconds
        decoding = step.decode_sequences
        if seconds is not None and seconds > 0.0 and decoding > 0:
            verified = step.verified_tokens or decoding * (step.k + 1)
            ms = seconds * 1000.0
            self._cost.add(step.batch_size, step.k, verified, step.context_tokens, ms)
            tokens = decoding + sum(step.accepted)
            weight = 1.0 / self.config.throughput_half_life_steps
            self._throughput += weight * (tokens / seconds - self._throughput)
            self._throughput_weight += weight * (1.0 - self._throughput_weight)
            if step.context_tokens > 0:
                self._context_seen += weight * (step.context_tokens / decoding - self._context_seen)
        self._pending_steps += 1
        if self._pending_steps >= self._recompute_interval:
            self.refresh()
        if self._exploring >= 0:
            self._retry_untimed_exploration(step)

    def _retry_untimed_exploration(self, step: StepRecord) -> None:
        """An exploration step that carried a prefill gave no step time, and a step time is
        what it was for: run the same K on the next step, at most ``EXPLORE_RETRIES``
        times, without counting it against the budget. At large batch sizes most
        steps carry a prefill, and an exploration spent there would be lost."""
        explored, self._exploring = self._exploring, -1
        timed = step.step_seconds is not None and step.step_seconds > 0.0
        if step.k != explored or timed or self._explore_retries >= EXPLORE_RETRIES:
            self._explore_retries = 0
            return
        self._explore_retries += 1
        self.exploration_steps -= 1
        self._explore_k = explored

    # --- slow paths ----------------------------------------------------------

    def _fallback_k(self, batch_size: int) -> int:
        if batch_size > self._fallback_last:
            return self._fallback[self._fallback_last]
        return self._fallback[batch_size if batch_size > 0 else 0]

    def _first_step(self, batch_size: int) -> float:
        """Start the EMA at the first batch size and the current K at its best K."""
        i = min(max(batch_size, 1), self.max_batch_size)
        self._k = self._best_k[i]
        return float(batch_size)

    def refresh(self) -> None:
        """Fold the pending observations into the estimators and rebuild the table now."""
        steps, self._pending_steps = self._pending_steps, 0
        self._acceptance.fold(steps)
        self._drafting.fold(steps)
        self._survival.fold(steps)
        self._cost.fold()
        self._rebuild()

    @property
    def throughput(self) -> float:
        """The system's observed tokens/s (the throughput objective's lambda); 0 before any."""
        return self._throughput / self._throughput_weight if self._throughput_weight > 0 else 0.0

    @property
    def context_per_sequence(self) -> float:
        """The live mean context per decoding sequence (the profile's until steps say)."""
        if self._throughput_weight > 0.0 and self._context_seen > 0.0:
            return self._context_seen / self._throughput_weight
        return self._context

    def _rebuild(self) -> None:
        """Recompute the tables (Python lists) from the estimators."""
        rates = self._acceptance.estimate()
        survival = self._survival.estimate()
        columns = self.max_k + 1
        verified = [verified_per_sequence(survival, k) for k in range(columns)]
        context = self.context_per_sequence
        itl = self._cost.grid(verified, context)
        lengths = acceptance_lengths(rates, self.max_k)
        ratio = 1000.0 * lengths[np.newaxis, :] / itl
        ratio[0] = ratio[1]
        lam = self.throughput
        if self.config.objective == "throughput" and lam > 0.0:
            tokens = self._sizes[:, None] * lengths[None, :]
            score = tokens - lam * itl / 1000.0
            bar = score + self.config.switch_margin * tokens
        else:
            score = ratio.copy()
            bar = score * (1.0 + self.config.switch_margin)
        score[0] = score[1]
        bar[0] = bar[1]
        masked = np.where(self._usable, score, -np.inf)
        best = np.argmax(masked, axis=1)  # ties: smaller K
        self._rates = rates
        self._survival_now = survival
        self._lengths = lengths
        self._itl_now = itl
        self._ratio = ratio
        self._verified = verified
        # A K unavailable at a batch size scores lowest and bars nothing: a pod running it
        # (its batch size just moved) leaves it for the best available K at once.
        self._score: list[list[float]] = np.where(self._usable, score, _UNAVAILABLE).tolist()
        self._bar: list[list[float]] = np.where(self._usable, bar, _UNAVAILABLE).tolist()
        self._best_k: list[int] = best.tolist()
        self._plan_exploration(rates, verified, itl, lengths, lam)
        self._plan_reference(ratio)
        self.generation += 1

    def _plan_exploration(
        self,
        rates: Sequence[float],
        verified: Sequence[float],
        itl: npt.NDArray[np.float64],
        lengths: npt.NDArray[np.float64],
        lam: float,
    ) -> None:
        """Set one K to explore next step when its optimistic goodput beats the current K's."""
        self._explore_k = -1
        cfg = self.config
        if cfg.explore_budget <= 0.0 or self._k < 0 or self._bs_ema < 0.0:
            return
        if self.exploration_steps + 1 > cfg.explore_budget * max(self._tick, 1) + 1:
            return
        i = self._row(int(self._bs_ema + 0.5))
        z = cfg.explore_z
        sd_rates = np.sqrt(self._acceptance.variance())
        upper_rates = np.minimum(np.asarray(rates) + z * sd_rates, 1.0)
        upper_lengths = acceptance_lengths(list(upper_rates), self.max_k)
        lower_itl = np.maximum(itl[i] - z * self._cost.sd_grid(verified)[i], 1e-6)
        cur = self._k
        bs = float(i)
        if cfg.objective == "throughput" and lam > 0.0:
            optimistic = bs * upper_lengths - lam * lower_itl / 1000.0
            current = bs * lengths[cur] - lam * itl[i, cur] / 1000.0
        else:
            optimistic = 1000.0 * upper_lengths / lower_itl
            current = 1000.0 * lengths[cur] / itl[i, cur]
        chosen, margin = -1, 0.0
        usable = self._usable[i]
        for k in self.allowed_k:
            gap = float(optimistic[k] - current)
            if k != cur and usable[k] and gap > margin:
                chosen, margin = k, gap
        self._explore_k = chosen

    def _plan_reference(self, ratio: npt.NDArray[np.float64]) -> None:
        """How often the plain reference runs: ``plain_reference_cost`` of the predicted
        throughput over what a K=0 step loses to the K in force, at most
        ``plain_reference_share`` of steps; none while K=0 is in force or unavailable.
        The wait left to the next run keeps its share of the period when the period
        moves: a run planned where K=0 was close (a large batch) is not spent where it
        is far behind (the drain's stragglers, where one run of 16 steps can be 0.1% of
        a rollout's makespan)."""
        before, self._reference_period = self._reference_period, 0
        cfg = self.config
        cur = self._k
        if cfg.plain_reference_share <= 0.0 or cur <= 0 or self._bs_ema < 0.0:
            return
        i = self._row(int(self._bs_ema + 0.5))
        if not (self._usable[i, 0] and self._usable[i, cur]):
            return
        loss = 1.0 - float(ratio[i, 0]) / float(ratio[i, cur])
        share = cfg.plain_reference_share
        if loss * share > cfg.plain_reference_cost:
            share = cfg.plain_reference_cost / loss
        if share <= 0.0:
            return
        run = cfg.plain_reference_run
        period = max(round(run / share), run + 1)
        self._reference_period = period
        due = self._reference_due
        self._reference_due = max(round(due * period / before), 1) if before and due else period

    # --- introspection -------------------------------------------------------

    @property
    def current_k(self) -> int:
        """The K in force (exploration steps aside); -1 before the first step."""
        return self._k

    @property
    def smoothed_batch_size(self) -> float:
        """The batch-size EMA the table is indexed by; -1.0 before the first step."""
        return self._bs_ema

    @property
    def steps(self) -> int:
        """Steps chosen while enabled."""
        return self._tick

    def _row(self, batch_size: int) -> int:
        return min(max(batch_size, 1), self.max_batch_size)

    def _preferred(self, i: int) -> int:
        """The K ``choose_k`` would keep or switch to at row ``i`` (dwell and exploration aside)."""
        best = self._best_k[i]
        cur = self._k if self._k >= 0 else best
        row = self._score[i]
        if best == 0:
            return 0 if row[0] >= row[cur] else cur
        return best if row[best] > self._bar[i][cur] else cur

    def vanilla_goodput(self, batch_size: int) -> float | None:
        """Plain decoding's predicted tokens/s per sequence (None without a profiled baseline)."""
        i = self._row(batch_size)
        vanilla = self.cost_prior.vanilla_itl_ms(i, self.context_per_sequence)
        if vanilla is None:
            return None
        scale = self._cost.global_scale  # a machine slower than profiled is slower for vanilla too
        return 1000.0 / (vanilla * scale)

    def gain_over_vanilla(self, batch_size: int) -> float | None:
        """The chosen K's predicted goodput over plain decoding's (below 1.0: speculation loses)."""
        vanilla = self.vanilla_goodput(batch_size)
        if vanilla is None:
            return None
        i = self._row(batch_size)
        return float(self._ratio[i][self._preferred(i)]) / vanilla

    def explain(self, batch_size: int) -> dict[int, KEstimate]:
        """Predictions for every allowed K at ``batch_size`` (raw, not smoothed)."""
        i = self._row(batch_size)
        chosen = self._preferred(i)
        context = self.context_per_sequence
        return {
            k: KEstimate(
                k=k,
                acceptance_length=float(self._lengths[k]),
                itl_ms=float(self._itl_now[i, k]),
                goodput=float(self._ratio[i, k]),
                chosen=k == chosen,
                itl_correction=self._cost.correction(i, k, i * self._verified[k], i * context),
            )
            for k in self.allowed_k
            if self._usable[i][k]
        }

    def estimates(self) -> PolicyEstimates:
        """Current acceptance, drafting and cost estimates, as of the last rebuild."""
        acc, cost = self._acceptance, self._cost
        buckets = [(*bucket_bounds(b), b) for b in range(cost.buckets)]
        return PolicyEstimates(
            acceptance=tuple(self._rates),
            acceptance_prior=tuple(float(p) for p in acc.prior),
            acceptance_samples=tuple(float(d) for d in acc.evidence()),
            acceptance_drift=acc.drift(),
            drafting_rate=tuple(self._drafting.estimate()),
            proposal_survival=tuple(self._survival_now),
            cost_scale={
                (lo, min(hi, self.max_batch_size)): float(cost.scale[b])
                for lo, hi, b in buckets
                if lo <= self.max_batch_size
            },
            cost_samples={
                (lo, min(hi, self.max_batch_size)): float(cost.count[b])
                for lo, hi, b in buckets
                if lo <= self.max_batch_size
            },
            draft_token_cost_ms={
                (lo, min(hi, self.max_batch_size)): float(cost.draft_token_ms[b])
                for lo, hi, b in buckets
                if lo <= self.max_batch_size
            },
            global_cost_scale=cost.global_scale,
            context_cost_ms_per_token=cost.gamma,
            context_per_sequence=self.context_per_sequence,
            throughput=self.throughput,
            acceptance_changes=acc.changes,
            generation=self.generation,
            steps=self._tick,
            exploration_steps=self.exploration_steps,
            switches=self.switches,
            current_k=self._k,
        )

    def __repr__(self) -> str:
        return f"<AdaptivePolicy k={self._k} allowed={list(self.allowed_k)} gen={self.generation}>"
