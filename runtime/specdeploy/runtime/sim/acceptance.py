"""Acceptance profiles and how the simulator samples accepted draft counts.

A profile is the conditional acceptance a_i of draft position i given that
positions < i were accepted (DESIGN.md, "The math"). Its survival curve
S_n = prod_{j<=n} a_j is the probability that at least n drafts are accepted.

Sampling uses one uniform u per (sequence, step): the number accepted is the
largest n <= K with S_n > u. The same u gives nested answers for every K
(common random numbers), so runs that differ only in K differ only through K,
and E[n + 1] = AL(K) exactly.

Acceptance may move while a run goes on (``Drifting``: a profile that
changes with time or step index), cluster in bursts (``Bursty``: n-gram
lookup hits long runs in repetitive text, then misses), or differ between
the requests of one batch (``Mixture``: two traffic classes served
together, each request keeping its class).

These rates are acceptance *given a proposal*. For EAGLE and draft models,
which always propose K, that is the acceptance of ``goodput``; lookup
drafters propose less often (``proposals.py``), and the acceptance that
counts a missing draft as a rejection is q_i times these rates
(``proposals.effective_rates``). All figures are modelled stand-ins for what
a workload would show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.goodput import acceptance_lengths

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def survival(per_position: Sequence[float]) -> FloatArray:
    """S_n = prod_{j<=n} a_j for n = 1..len(per_position)."""
    out: FloatArray = np.cumprod(np.asarray(per_position, dtype=np.float64), dtype=np.float64)
    return out


def count_accepted(surv: FloatArray, u: FloatArray, k: int) -> IntArray:
    """Largest n <= k with S_n > u, for each uniform in ``u`` (S decreasing)."""
    if k <= 0 or surv.size == 0:
        return np.zeros(u.shape, dtype=np.int64)
    # -S is ascending; the count of S_n > u is the count of -S_n < -u.
    return _searchsorted_neg(-surv[: min(k, surv.size)], u)


def _searchsorted_neg(neg_head: FloatArray, u: FloatArray) -> IntArray:
    counts: IntArray = np.searchsorted(neg_head, -u, side="left")
    return counts


class AcceptanceModel(Protocol):
    """What the engine asks: accepted counts for one step's decoding sequences."""

    @property
    def positions(self) -> int:
        """Draft positions the model has rates for."""
        ...

    def nominal(self) -> tuple[float, ...]:
        """The per-position rates at the start of a run (a profile's prior)."""
        ...

    def rates_at(self, step: int, t: float) -> tuple[float, ...]:
        """The per-position rates in force at (step, t): what an oracle may know."""
        ...

    def sampler(self, slots: int, rng: np.random.Generator) -> AcceptanceSampler:
        """Fresh per-run state for ``slots`` batch slots."""
        ...


class AcceptanceSampler(Protocol):
    """Per-run sampling state (e.g. each slot's burst state)."""

    def admit(self, slots: IntArray) -> None:
        """New requests took these slots: reset whatever they carried."""
        ...

    def accepted(self, u: FloatArray, decoding: BoolArray, k: int, step: int, t: float) -> IntArray:
        """Accepted drafts per slot given each slot's uniform (all slots at once).

        Entries of slots that are not ``decoding`` are meaningless; burst
        states only move for decoding slots. Counts are nested in K (the
        count at K is min(count at K', K) for K' >= K), so a caller may ask
        once at the largest K of the step and clip per slot.
        """
        ...


@runtime_checkable
class ClassedSampler(AcceptanceSampler, Protocol):
    """A sampler whose slots belong to traffic classes (``Mixture``)."""

    @property
    def slot_classes(self) -> IntArray:
        """Class index of the request in each slot."""
        ...


@dataclass(frozen=True)
class Profile:
    """A fixed conditional acceptance profile."""

    per_position: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.per_position or not all(0.0 <= a <= 1.0 for a in self.per_position):
            raise ValueError(f"per-position rates must be in [0, 1]: {self.per_position}")

    @property
    def positions(self) -> int:
        return len(self.per_position)

    def nominal(self) -> tuple[float, ...]:
        return self.per_position

    def rates_at(self, step: int, t: float) -> tuple[float, ...]:
        return self.per_position

    def scaled(self, first: float) -> Profile:
        """The same curve moved so that position 1 accepts ``first`` (capped at 0.99)."""
        level = first / self.per_position[0] if self.per_position[0] > 0 else 0.0
        return Profile(tuple(min(0.99, round(a * level, 4)) for a in self.per_position))

    def acceptance_length(self, k: int) -> float:
        """AL(K) = 1 + sum_{i<=K} S_i."""
        return float(acceptance_lengths(self.per_position, k)[k])

    def sampler(self, slots: int, rng: np.random.Generator) -> AcceptanceSampler:
        return _StaticSampler(survival(self.per_position))


@dataclass
class _StaticSampler:
    surv: FloatArray

    def admit(self, slots: IntArray) -> None:
        return None

    def accepted(self, u: FloatArray, decoding: BoolArray, k: int, step: int, t: float) -> IntArray:
        return count_accepted(self.surv, u, k)


@dataclass(frozen=True)
class Drifting:
    """Acceptance that moves from ``before`` to ``after`` at ``at`` over ``ramp``.

    ``clock`` is "seconds" (simulated time) or "steps" (step index): drift
    scenarios test how fast a policy notices the workload changed.
    """

    before: Profile
    after: Profile
    at: float
    ramp: float = 0.0
    clock: str = "seconds"

    def __post_init__(self) -> None:
        if self.clock not in ("seconds", "steps"):
            raise ValueError(f"clock must be 'seconds' or 'steps', got {self.clock!r}")

    @property
    def positions(self) -> int:
        return max(self.before.positions, self.after.positions)

    def nominal(self) -> tuple[float, ...]:
        return self.before.per_position

    def weight(self, step: int, t: float) -> float:
        """0 before the drift, 1 after it, linear over the ramp."""
        x = t if self.clock == "seconds" else float(step)
        if self.ramp <= 0.0:
            return 1.0 if x >= self.at else 0.0
        return min(1.0, max(0.0, (x - self.at) / self.ramp))

    def rates_at(self, step: int, t: float) -> tuple[float, ...]:
        """Per-position rates in force at (step, t)."""
        return tuple(float(r) for r in self.rate_array(step, t))

    def rate_array(self, step: int, t: float) -> FloatArray:
        """``rates_at`` as an array (the sampler's form)."""
        n = self.positions
        a = np.zeros(n)
        b = np.zeros(n)
        a[: self.before.positions] = self.before.per_position
        b[: self.after.positions] = self.after.per_position
        w = self.weight(step, t)
        rates: FloatArray = (1.0 - w) * a + w * b
        return rates

    def sampler(self, slots: int, rng: np.random.Generator) -> AcceptanceSampler:
        return _DriftSampler(self)


@dataclass
class _DriftSampler:
    drift: Drifting
    _last_w: float = -1.0
    _surv: FloatArray = field(default_factory=lambda: np.zeros(0))

    def admit(self, slots: IntArray) -> None:
        return None

    def accepted(self, u: FloatArray, decoding: BoolArray, k: int, step: int, t: float) -> IntArray:
        w = self.drift.weight(step, t)
        if w != self._last_w:
            self._surv = survival(self.drift.rate_array(step, t).tolist())
            self._last_w = w
        return count_accepted(self._surv, u, k)


@dataclass(frozen=True)
class Bursty:
    """Two-state acceptance per sequence: bursts of ``hit`` among ``miss``.

    Each sequence is in a hit state (text that repeats its context, where
    n-gram lookup drafts well) or a miss state; it enters a burst with
    probability ``p_enter`` per step and leaves with ``p_exit``. New requests
    start in the stationary mix.
    """

    miss: Profile
    hit: Profile
    p_enter: float
    p_exit: float

    @property
    def positions(self) -> int:
        return max(self.miss.positions, self.hit.positions)

    @property
    def hit_fraction(self) -> float:
        """Stationary share of steps spent in a burst."""
        return self.p_enter / (self.p_enter + self.p_exit)

    def nominal(self) -> tuple[float, ...]:
        """Conditional rates of the stationary mixture (what counts would estimate)."""
        n = self.positions
        h = self.hit_fraction
        s_miss = np.zeros(n)
        s_hit = np.zeros(n)
        s_miss[: self.miss.positions] = survival(self.miss.per_position)
        s_hit[: self.hit.positions] = survival(self.hit.per_position)
        mixed = (1.0 - h) * s_miss + h * s_hit
        prev = np.concatenate(([1.0], mixed[:-1]))
        rates = np.divide(mixed, prev, out=np.zeros(n), where=prev > 0)
        return tuple(float(r) for r in rates)

    def rates_at(self, step: int, t: float) -> tuple[float, ...]:
        return self.nominal()

    def sampler(self, slots: int, rng: np.random.Generator) -> AcceptanceSampler:
        return _BurstySampler(self, rng, slots)


class _BurstySampler:
    def __init__(self, model: Bursty, rng: np.random.Generator, slots: int) -> None:
        self.model, self.rng = model, rng
        self.in_burst: BoolArray = np.zeros(slots, dtype=bool)
        n = model.positions
        self.surv_miss: FloatArray = np.zeros(n)
        self.surv_hit: FloatArray = np.zeros(n)
        self.surv_miss[: model.miss.positions] = survival(model.miss.per_position)
        self.surv_hit[: model.hit.positions] = survival(model.hit.per_position)

    def admit(self, slots: IntArray) -> None:
        self.in_burst[slots] = self.rng.random(slots.size) < self.model.hit_fraction

    def accepted(self, u: FloatArray, decoding: BoolArray, k: int, step: int, t: float) -> IntArray:
        state = self.in_burst.copy()
        flip = self.rng.random(state.size)
        moved = np.where(state, flip >= self.model.p_exit, flip < self.model.p_enter)
        self.in_burst = np.where(decoding, moved, state)
        miss = count_accepted(self.surv_miss, u, k)
        hit = count_accepted(self.surv_hit, u, k)
        out: IntArray = np.where(state, hit, miss)
        return out


def mixture_rates(profiles: Sequence[Profile], shares: Sequence[float]) -> tuple[float, ...]:
    """Conditional rates of a mixture: what pooled reached/accepted counts estimate.

    Pooling counts over requests of several classes reproduces the mixture's
    survival function S(n) = sum_c w_c S_c(n); its ratios are the rates.
    """
    n = max(p.positions for p in profiles)
    mixed = np.zeros(n)
    for p, w in zip(profiles, shares, strict=True):
        s = np.zeros(n)
        s[: p.positions] = survival(p.per_position)
        mixed += w * s
    prev = np.concatenate(([1.0], mixed[:-1]))
    rates = np.divide(mixed, prev, out=np.zeros(n), where=prev > 0)
    return tuple(float(r) for r in rates)


@dataclass(frozen=True)
class Mixture:
    """Requests of several classes in one batch, each with its own acceptance.

    Models two kinds of traffic served together (say, code completion and
    open chat): each request draws its class on admission with the given
    shares and keeps it. A batch-uniform K sees the pooled rates
    (``nominal``); a per-request K could serve each class its own.
    """

    classes: tuple[Profile, ...]
    shares: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.classes) != len(self.shares) or not self.classes:
            raise ValueError("classes and shares must be non-empty and of equal length")
        if any(w < 0 for w in self.shares) or abs(sum(self.shares) - 1.0) > 1e-9:
            raise ValueError(f"shares must be >= 0 and sum to 1, got {self.shares}")

    @property
    def positions(self) -> int:
        return max(p.positions for p in self.classes)

    def nominal(self) -> tuple[float, ...]:
        return mixture_rates(self.classes, self.shares)

    def rates_at(self, step: int, t: float) -> tuple[float, ...]:
        return self.nominal()

    def sampler(self, slots: int, rng: np.random.Generator) -> AcceptanceSampler:
        return _MixtureSampler(self, rng, slots)


class _MixtureSampler:
    def __init__(self, model: Mixture, rng: np.random.Generator, slots: int) -> None:
        self.rng = rng
        self.bounds = np.cumsum(model.shares)[:-1]
        n = model.positions
        self.surv = []
        for p in model.classes:
            s = np.zeros(n)
            s[: p.positions] = survival(p.per_position)
            self.surv.append(s)
        self._classes: IntArray = np.zeros(slots, dtype=np.int64)

    @property
    def slot_classes(self) -> IntArray:
        return self._classes

    def admit(self, slots: IntArray) -> None:
        drawn = np.searchsorted(self.bounds, self.rng.random(slots.size), side="right")
        self._classes[slots] = drawn

    def accepted(self, u: FloatArray, decoding: BoolArray, k: int, step: int, t: float) -> IntArray:
        out: IntArray = np.zeros(u.shape, dtype=np.int64)
        for c, surv in enumerate(self.surv):
            mine = self._classes == c
            out[mine] = count_accepted(surv, u[mine], k)
        return out


# Default profiles (modelled), acceptance given a proposal. MT-Bench-like
# EAGLE; EAGLE-3 tuned so that AL(7) is ~3.5 as vLLM reports for
# Llama-3.1-8B on MT-Bench (#26191), with the 7th draft surviving <10% of the
# time; a 1B draft model for a 70B target. n-gram lookup given a match: the
# shipped SmolLM2 CPU profile accepted 0.76/0.83/0.91 of proposed positions
# 1-3; here misses and bursts of copying around that, the drafting rate
# (~30% on chat) is separate (``proposals.CHAT_LOOKUP``).
EAGLE_MT_BENCH = Profile((0.8, 0.7, 0.6, 0.5, 0.42, 0.36, 0.3))
EAGLE_VLLM_ANCHORED = EAGLE_MT_BENCH.scaled(0.62)
"""EAGLE-1 near the level vLLM measures (#16035: AL(2) ~ 1.89, AL(4) ~ 2.08): the
MT-Bench curve's shape with position 1 at 0.62, AL(2) 1.96 and AL(4) 2.17. The
level is the joint fit of ``seed-dense`` (``calibration.py``)."""
EAGLE3_MT_BENCH = Profile((0.84, 0.76, 0.7, 0.64, 0.58, 0.52, 0.46))
DRAFT_MODEL_MT_BENCH = Profile((0.75, 0.68, 0.62, 0.57, 0.53, 0.5, 0.47))
NGRAM_MISS = Profile((0.6, 0.7, 0.75, 0.75, 0.75, 0.75, 0.75))
NGRAM_HIT = Profile((0.92, 0.9, 0.88, 0.86, 0.84, 0.82, 0.8))
NGRAM_CHAT = Bursty(miss=NGRAM_MISS, hit=NGRAM_HIT, p_enter=0.04, p_exit=0.12)
