"""Workloads: request lengths and how requests arrive.

Lengths are lognormal and clipped, the usual shape of chat traces: ShareGPT
(vLLM's benchmark set) has prompts and answers of a few hundred tokens with a
long tail; MT-Bench has short questions and long answers. The parameters
below are modelled to match those shapes, not fitted to the files.

Arrivals are either a closed loop (a fixed number of clients, each sending
its next request as soon as the previous one finishes: the batch stays at
the concurrency), an open loop (a Poisson process whose rate changes over
time, piecewise or sinusoidally: the batch follows the load), or a rollout
(an RL generation batch: every request at t = 0, none after, run until the
last straggler finishes). An oscillating loop is a closed loop whose
scheduled batch flickers between two sizes.

Open-loop arrival times are drawn ahead of the engine, from the rate and
the seed alone (``ArrivalPlan``): how fast a policy's steps are must not
change which requests arrive when, or two policies would not serve the same
traffic and their comparison would be luck.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Lengths:
    """Lognormal token counts (``median`` x e^(sigma N(0,1))) clipped to [lo, hi]."""

    median: float
    sigma: float
    lo: int = 1
    hi: int = 4096

    def __post_init__(self) -> None:
        if self.median <= 0 or self.sigma < 0 or not 1 <= self.lo <= self.hi:
            raise ValueError(f"invalid length distribution {self}")

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        """``n`` lengths."""
        raw = self.median * np.exp(self.sigma * rng.standard_normal(n))
        return np.clip(np.rint(raw), self.lo, self.hi).astype(np.int64)

    @property
    def mean(self) -> float:
        """Mean before clipping (e^(sigma^2/2) x median): a sizing figure."""
        return min(float(self.hi), self.median * math.exp(self.sigma**2 / 2.0))


def fixed(n: int) -> Lengths:
    """Every request has exactly ``n`` tokens (profiling batches)."""
    return Lengths(float(n), 0.0, n, n)


SHAREGPT_PROMPT = Lengths(median=130.0, sigma=1.1, lo=4, hi=4096)
SHAREGPT_OUTPUT = Lengths(median=150.0, sigma=1.0, lo=4, hi=2048)
MT_BENCH_PROMPT = Lengths(median=80.0, sigma=0.6, lo=8, hi=1024)
MT_BENCH_OUTPUT = Lengths(median=350.0, sigma=0.6, lo=16, hi=1024)


class Rate(Protocol):
    """Requests per second at simulated time t."""

    def __call__(self, t: float) -> float: ...


@dataclass(frozen=True)
class ConstantRate:
    rps: float

    def __call__(self, t: float) -> float:
        return self.rps


@dataclass(frozen=True)
class PiecewiseRate:
    """``points`` = ((t0, r0), (t1, r1), ...): rate r_i from t_i until t_{i+1}."""

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        times = [t for t, _ in self.points]
        if not self.points or times != sorted(times) or any(r < 0 for _, r in self.points):
            raise ValueError(f"points must be sorted by time with rates >= 0: {self.points}")

    def __call__(self, t: float) -> float:
        rate = self.points[0][1]
        for start, r in self.points:
            if t < start:
                break
            rate = r
        return rate


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` clients; a finished request is replaced at once."""

    concurrency: int
    prompt: Lengths = MT_BENCH_PROMPT
    output: Lengths = MT_BENCH_OUTPUT

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")


@dataclass(frozen=True)
class OpenLoop:
    """Poisson arrivals at ``rate(t)`` requests/s; excess waits in a queue.

    With ``horizon_s`` nobody arrives after it: a run without a step or time
    limit then serves every request to completion (drains).
    """

    rate: Rate
    prompt: Lengths = SHAREGPT_PROMPT
    output: Lengths = SHAREGPT_OUTPUT
    horizon_s: float | None = None

    def __post_init__(self) -> None:
        if self.horizon_s is not None and self.horizon_s <= 0:
            raise ValueError(f"horizon_s must be > 0, got {self.horizon_s}")


@dataclass(frozen=True)
class Rollout:
    """An RL rollout: ``requests`` prompts arrive at t = 0 and nothing after.

    The batch starts full and drains to one straggler; what counts is the
    makespan, the time until the last request finishes.
    """

    requests: int
    prompt: Lengths
    output: Lengths

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.requests}")


@dataclass(frozen=True)
class OscillatingLoop:
    """``high`` clients in a closed loop whose *scheduled* batch flickers low/high.

    Models the batch-size signal swinging around a table threshold, as prefill
    joins and finishing requests make it do (vLLM #49548): in the first half
    of every ``period_steps`` the engine schedules only ``low`` of the running
    requests (the others wait one step, as under a ``max_num_seqs`` cap), in
    the second half all ``high``.
    """

    low: int
    high: int
    period_steps: int = 8
    prompt: Lengths = MT_BENCH_PROMPT
    output: Lengths = MT_BENCH_OUTPUT

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high or self.period_steps < 2:
            raise ValueError(f"need 1 <= low <= high and period_steps >= 2: {self}")

    @property
    def concurrency(self) -> int:
        return self.high

    def scheduled_cap(self, step: int) -> int:
        """Most sequences the engine may schedule at ``step``."""
        return self.low if step % self.period_steps < self.period_steps // 2 else self.high


Workload = ClosedLoop | OpenLoop | OscillatingLoop | Rollout


def is_finite(workload: Workload) -> bool:
    """True when the workload's requests end, so a run may go on until it drains."""
    return isinstance(workload, Rollout) or (
        isinstance(workload, OpenLoop) and workload.horizon_s is not None
    )


class RequestStream:
    """Request i's (prompt, output) lengths, a function of the seed and i alone.

    Lengths are drawn in fixed blocks from two independent generators, so
    however the engine takes them (one at a time or many at once), request i
    gets the same lengths: runs that differ only in K see the same requests.
    """

    BLOCK = 4096

    def __init__(self, prompt: Lengths, output: Lengths, rng: np.random.Generator) -> None:
        self._prompt, self._output = prompt, output
        self._rng_p, self._rng_o = rng.spawn(2)
        self._p: IntArray = np.zeros(0, dtype=np.int64)
        self._o: IntArray = np.zeros(0, dtype=np.int64)
        self._i = 0

    def take(self, n: int) -> tuple[IntArray, IntArray]:
        """The next ``n`` requests' prompt and output lengths."""
        while self._i + n > self._p.size:
            self._p = np.concatenate(
                (self._p[self._i :], self._prompt.sample(self._rng_p, self.BLOCK))
            )
            self._o = np.concatenate(
                (self._o[self._i :], self._output.sample(self._rng_o, self.BLOCK))
            )
            self._i = 0
        p, o = self._p[self._i : self._i + n], self._o[self._i : self._i + n]
        self._i += n
        return p, o


class ArrivalPlan:
    """Poisson arrival times at ``rate(t)``, drawn ahead in fixed blocks of time.

    Block b covers [b, b + 1) seconds in ``SUBSTEPS`` slices; each slice draws
    a Poisson count at the rate in force mid-slice and uniform times within
    it. Blocks are drawn in order from one generator whatever the caller asks,
    so the arrival times are a function of the seed and the rate alone, never
    of the engine's step times (module docstring).
    """

    BLOCK_S = 1.0
    SUBSTEPS = 10

    def __init__(self, rate: Rate, rng: np.random.Generator, horizon_s: float | None = None):
        self._rate, self._rng, self._horizon = rate, rng, horizon_s
        self._times: list[float] = []
        self._next = 0
        self._blocks = 0

    def _draw_block(self) -> None:
        dt = self.BLOCK_S / self.SUBSTEPS
        start = self._blocks * self.BLOCK_S
        self._blocks += 1
        for j in range(self.SUBSTEPS):
            t0 = start + j * dt
            if self._horizon is not None and t0 >= self._horizon:
                return
            expected = self._rate(t0 + dt / 2.0) * dt
            n = int(self._rng.poisson(expected)) if expected > 0 else 0
            if n:
                times = np.sort(self._rng.uniform(t0, t0 + dt, n))
                if self._horizon is not None:
                    times = times[times < self._horizon]
                self._times.extend(float(x) for x in times)

    def _exhausted(self) -> bool:
        return self._horizon is not None and self._blocks * self.BLOCK_S >= self._horizon

    def _ensure(self, t: float) -> None:
        """Draw blocks until one starts after ``t`` (or the horizon is reached)."""
        while self._blocks * self.BLOCK_S <= t and not self._exhausted():
            self._draw_block()

    def pop_until(self, t: float) -> list[float]:
        """Arrivals at or before ``t`` not returned yet, in time order."""
        self._ensure(t)
        i = self._next
        times = self._times
        j = i
        while j < len(times) and times[j] <= t:
            j += 1
        self._next = j
        return times[i:j]

    def next_time(self, limit: float = float("inf")) -> float | None:
        """The next arrival not returned yet, or None when there is none up to ``limit``."""
        while self._next >= len(self._times):
            if self._exhausted() or self._blocks * self.BLOCK_S > limit:
                return None
            self._draw_block()
        return self._times[self._next]
