"""The adaptive K policy: goodput = AL / ITL from live acceptance and corrected step costs.

Two speeds:

* per step (``choose_k``): one EMA update of the batch size, two list
  lookups, one compare. No numpy, no allocation, no device sync. It keeps
  the current K unless the table's best K at the smoothed batch size beats
  it by ``switch_margin`` (hysteresis), and not within ``min_dwell_steps``
  of the last switch unless the current K has fallen below K=0 by more than
  the margin. About once per ``explore_interval`` steps it may run another K
  (exploration), so that estimates for K not in use stay fresh.
* every ``recompute_interval`` observed steps (``refresh``): fold the live
  counts into the estimators and rebuild the dense table ``best_k[bs]`` and
  ``goodput[bs][k]`` as Python lists.

Not thread-safe: vLLM's scheduler calls both methods from one thread.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.policy.config import AdaptiveConfig
from specdeploy.runtime.policy.estimators import (
    AcceptanceEstimator,
    ItlCorrector,
    bucket_bounds,
)
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
from specdeploy.runtime.schedule import itl_grid, k_values

_NEVER = -(1 << 40)
"""The step a K that was never observed was last seen at: stalest of all."""


def _clamped_bounds(bucket: int, max_batch_size: int) -> tuple[int, int]:
    lo, hi = bucket_bounds(bucket)
    return lo, min(hi, max_batch_size)


# --- the policy --------------------------------------------------------------


class AdaptivePolicy:
    """Chooses K per step to maximise predicted goodput, without thrashing.

    ``itl_ms[bs][k]`` is the profile's dense step-time grid in ms (row 0
    unused, NaN where a cell is unavailable), ``prior`` the profile's
    acceptance per position. ``allowed_k`` defaults to every K with a finite
    cell; ``fallback`` (a dense lookup like vLLM's) is what ``choose_k``
    returns while ``enabled`` is False, by default the profile's own optimum.
    """

    name = "adaptive"

    def __init__(
        self,
        itl_ms: npt.ArrayLike,
        prior: Sequence[float],
        *,
        allowed_k: Sequence[int] | None = None,
        fallback: Sequence[int] | None = None,
        config: AdaptiveConfig | None = None,
    ) -> None:
        cfg = config if config is not None else AdaptiveConfig()
        grid = checked_grid(itl_ms)
        allowed = checked_allowed(allowed_k, grid)
        checked_rows(grid, allowed)
        rates = checked_prior(prior, allowed)
        self.config = cfg
        self.allowed_k = allowed
        self.max_batch_size: int = int(grid.shape[0]) - 1
        self.enabled = True
        self._grid = grid
        self._usable = np.isfinite(grid)
        self._usable[:, [k for k in range(grid.shape[1]) if k not in allowed]] = False
        self._acceptance = AcceptanceEstimator(
            rates,
            prior_weight=cfg.acceptance_prior_weight,
            half_life_tokens=cfg.acceptance_half_life_tokens,
            half_life_steps=cfg.acceptance_half_life_steps,
            share_drift=cfg.share_acceptance_drift,
        )
        self._itl = ItlCorrector(
            grid,
            prior_weight=cfg.itl_prior_weight,
            half_life_steps=cfg.itl_half_life_steps,
            bounds=(cfg.itl_correction_min, cfg.itl_correction_max),
            global_share=cfg.itl_global_share,
        )
        self.generation = 0
        self._rebuild()
        self._fallback = (
            list(self._best_k) if fallback is None else checked_fallback(fallback, allowed)
        )
        self._init_step_state()

    def _init_step_state(self) -> None:
        """Per-step state, read and written on the hot path."""
        cfg = self.config
        self._alpha = cfg.bs_smoothing
        self._switch_ratio = 1.0 + cfg.switch_margin
        self._dwell = cfg.min_dwell_steps
        self._recompute_interval = cfg.recompute_interval
        self._fallback_last = len(self._fallback) - 1
        self._bs_ema = -1.0  # < 0: no step yet
        self._k = -1  # set on the first step
        self._tick = 0
        self._dwell_until = 0
        self._pending_steps = 0
        self._last_seen = [_NEVER] * self._grid.shape[1]
        self._rng = random.Random(cfg.seed)
        self._explore_at = self._next_exploration()
        self.switches = 0
        self.exploration_steps = 0

    @classmethod
    def from_profile(
        cls,
        profile: SpeculationProfile | ProfileSpec,
        config: AdaptiveConfig | None = None,
        *,
        max_batch_size: int | None = None,
    ) -> AdaptivePolicy:
        """From a profile: its dense ITL grid, acceptance prior, measured K and schedule."""
        spec = profile_spec(profile)
        grid = itl_grid(spec, max_batch_size)
        return cls(
            grid,
            spec.acceptance.per_position,
            allowed_k=k_values(spec),
            fallback=static_lookup(spec, grid.shape[0] - 1),
            config=config,
        )

    # --- hot path ------------------------------------------------------------

    def choose_k(self, batch_size: int) -> int:
        """K for this step. O(1): an EMA, list lookups, a compare."""
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
        if tick >= self._explore_at:
            explored = self._explore(i)
            if explored >= 0:
                return explored
        cur = self._k
        best = self._best_k[i]
        if best != cur:
            row = self._goodput[i]
            bar = row[cur] * self._switch_ratio
            if row[best] > bar and (tick >= self._dwell_until or row[0] >= bar):
                self._k = best
                self._dwell_until = tick + self._dwell
                self.switches += 1
                return best
        return cur

    def observe(self, step: StepRecord) -> None:
        """Take one finished step in; rebuild the table every ``recompute_interval`` steps."""
        batch_size, k, step_seconds = step.batch_size, step.k, step.step_seconds
        self._acceptance.add(step.reached, step.accepted)
        if step_seconds is not None:
            self._itl.add(batch_size, k, step_seconds * 1000.0)
        if 0 <= k < len(self._last_seen):
            self._last_seen[k] = self._tick
        self._pending_steps += 1
        if self._pending_steps >= self._recompute_interval:
            self.refresh()

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

    def _next_exploration(self) -> int:
        """The step of the next exploration: mean ``explore_interval`` away, jittered."""
        interval = self.config.explore_interval
        if interval == 0:
            return sys.maxsize
        gap = int(interval * (0.75 + 0.5 * self._rng.random()))
        return self._tick + max(gap, 1)

    def _explore(self, i: int) -> int:
        """A K to try for this step at row ``i``, or -1: the stalest K within the loss bound."""
        self._explore_at = self._next_exploration()
        row = self._goodput[i]
        floor = row[self._k] * (1.0 - self.config.explore_max_loss)
        chosen, key = -1, (-1, 0.0)
        for k in self.allowed_k:
            if k == self._k or row[k] <= 0.0 or row[k] < floor:
                continue
            age = self._tick - self._last_seen[k]
            if age >= self.config.explore_min_staleness and (age, row[k]) > key:
                chosen, key = k, (age, row[k])
        if chosen >= 0:
            self.exploration_steps += 1
        return chosen

    def refresh(self) -> None:
        """Fold the pending observations into the estimators and rebuild the table now."""
        steps, self._pending_steps = self._pending_steps, 0
        self._acceptance.fold(steps)
        self._itl.fold(steps)
        self._rebuild()

    def _rebuild(self) -> None:
        """Recompute goodput[bs][k] and best_k[bs] (Python lists) from the estimators."""
        rates = self._acceptance.estimate()
        lengths = acceptance_lengths(rates, self._grid.shape[1] - 1)
        factors = self._itl.per_batch_size(self._itl.factors())
        itl = self._grid * factors
        goodput = np.where(self._usable, 1000.0 * lengths[np.newaxis, :] / itl, 0.0)
        goodput[0] = goodput[1]  # batch size 0 is never indexed; keep it harmless anyway
        self._rates = rates
        self._lengths = lengths
        self._factors = factors
        self._itl_now = itl
        self._goodput: list[list[float]] = goodput.tolist()
        self._best_k: list[int] = np.argmax(goodput, axis=1).tolist()  # ties: smaller K
        self.generation += 1

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
        row = self._goodput[i]
        return best if row[best] > row[cur] * self._switch_ratio else cur

    def explain(self, batch_size: int) -> dict[int, KEstimate]:
        """Predictions for every allowed K available at ``batch_size`` (raw, not smoothed)."""
        i = self._row(batch_size)
        chosen = self._preferred(i)
        row = self._goodput[i]
        return {
            k: KEstimate(
                k=k,
                acceptance_length=float(self._lengths[k]),
                itl_ms=float(self._itl_now[i, k]),
                goodput=row[k],
                chosen=k == chosen,
                itl_correction=float(self._factors[i, k]),
            )
            for k in self.allowed_k
            if row[k] > 0.0
        }

    def estimates(self) -> PolicyEstimates:
        """Current acceptance and step-time corrections, as of the last rebuild."""
        acc, itl = self._acceptance, self._itl
        factors = itl.factors()
        cells = [(b, k) for b in range(itl.buckets) for k in self.allowed_k]
        bounds = [_clamped_bounds(b, self.max_batch_size) for b in range(itl.buckets)]
        return PolicyEstimates(
            acceptance=tuple(self._rates),
            acceptance_prior=tuple(float(p) for p in acc.prior),
            acceptance_samples=tuple(float(d) for d in acc.drafted),
            acceptance_drift=acc.drift(),
            itl_correction={(*bounds[b], k): float(factors[b, k]) for b, k in cells},
            itl_samples={(*bounds[b], k): float(itl.count[b, k]) for b, k in cells},
            global_itl_correction=itl.global_factor(),
            generation=self.generation,
            steps=self._tick,
            exploration_steps=self.exploration_steps,
            switches=self.switches,
            current_k=self._k,
        )

    def __repr__(self) -> str:
        return f"<AdaptivePolicy k={self._k} allowed={list(self.allowed_k)} gen={self.generation}>"
