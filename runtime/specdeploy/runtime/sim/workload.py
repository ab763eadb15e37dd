"""Workloads: request lengths and how requests arrive.

Lengths are lognormal and clipped, the usual shape of chat traces: ShareGPT
(vLLM's benchmark set) has prompts and answers of a few hundred tokens with a
long tail; MT-Bench has short questions and long answers. The parameters
below are modelled to match those shapes, not fitted to the files.

Arrivals are either a closed loop (a fixed number of clients, each sending
its next request as soon as the previous one finishes: the batch stays at
the concurrency) or an open loop (a Poisson process whose rate changes over
time, piecewise or sinusoidally: the batch follows the load). An oscillating
loop is a closed loop whose scheduled batch flickers between two sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
class SinusoidalRate:
    """mean + amplitude x sin(2 pi t / period + phase), floored at 0."""

    mean: float
    amplitude: float
    period_s: float
    phase: float = 0.0

    def __call__(self, t: float) -> float:
        wave = math.sin(2.0 * math.pi * t / self.period_s + self.phase)
        return max(0.0, self.mean + self.amplitude * wave)


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
    """Poisson arrivals at ``rate(t)`` requests/s; excess waits in a queue."""

    rate: Rate
    prompt: Lengths = SHAREGPT_PROMPT
    output: Lengths = SHAREGPT_OUTPUT


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


Workload = ClosedLoop | OpenLoop | OscillatingLoop


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


def arrivals(rate: Rate, t0: float, t1: float, rng: np.random.Generator) -> Sequence[float]:
    """Poisson arrival times in [t0, t1) at the rate in force mid-interval."""
    expected = rate(0.5 * (t0 + t1)) * (t1 - t0)
    n = int(rng.poisson(expected)) if expected > 0 else 0
    if n == 0:
        return ()
    return sorted(float(x) for x in rng.uniform(t0, t1, n))
