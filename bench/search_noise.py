"""A realistic measurement-noise model for ``bench/profiler_search.py``, fitted from a raw file.

The simulated backend's default noise (3% iid log-normal per step) is kinder
than a real engine: on the shipped CPU profile (``profiles/*.raw.json``)
step times spread by 5-30% per cell, consecutive steps are correlated, one
repeat's mean can sit far from another's (a different prompt set, a busy
neighbour), and acceptance varies from prompt to prompt far beyond the
binomial. A search whose intervals assume independent steps can be misled
by exactly those features, so the bench re-runs its targets under them.

The model (``NoiseModel``), applied to the noise-free simulator by
``NoisyBackend``: step t of repeat r takes ``true_t * (1 + o_r) * (1 + e_t)``

* ``1 + e_t``: stationary log-normal AR(1) with mean 1, marginal CV ``cv``
  and lag-1 autocorrelation ``rho`` (``ar1_factors``). Log-normal keeps
  every step positive and right-skewed (stalls, not speed-ups), and the
  Gaussian coefficient is solved so that the *factor's* lag-1
  autocorrelation is ``rho`` exactly. Each repeat starts a fresh stationary
  series (a new run).
* ``1 + o_r``: one log-normal draw per repeat (per prompt set), mean 1, sd
  ``offset_sd``; not scaled with batch size (clock and host effects do not
  average out over sequences).
* acceptance: per repeat and draft position, the rate accepted/proposed is
  drawn from a Beta around the sample's own rate with variance
  ``icc * p (1 - p) / batch_size`` (the between-prompt share of a
  batch of independent prompts, ``icc`` the intra-prompt correlation), then
  accepted ~ Binomial(proposed, rate). Mean-preserving and bounded; only
  acceptance given a proposal moves, so proposals, verified tokens and the
  simulator's step times stay consistent with each other.

Every factor has mean 1, so the noise-free truth the bench scores against
is still the truth of what the noisy backend measures.

Fitting (``fit_raw``) works on relative deviations ``y_t / mean_r - 1`` of
each repeat, whose sample statistics are biased on short repeats (16 steps
in the shipped file): the demeaned lag-1 autocorrelation is biased down by
about (1 + 3 rho) / n, and the sample variance by the AR(1) variance of the
mean. So ``fit_ar1`` solves for the rho whose *expected* pooled statistic
(ratio of expectations, exact for the centred AR(1) covariance) equals the
observed one, and divides the pooled variance by its expected value under
that rho. ``fit_offset_sd`` takes the variance of repeat means beyond what
the within-repeat noise (with that rho's variance inflation) explains, and
``fit_acceptance_icc`` the per-cell variance of position-1 acceptance
beyond the binomial, by moments. Each has a unit test on synthetic data
with known parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.profile import Fingerprint, Source
from specdeploy.runtime.profiler.backend import CellSample
from specdeploy.runtime.profiler.sim_backend import SimBackend

# --- the noise model ------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseModel:
    """Step-time and acceptance noise of a real engine (module docstring)."""

    cv: float
    """Marginal coefficient of variation of the per-step factor 1 + e_t."""
    rho: float = 0.5
    """Lag-1 autocorrelation of the per-step factor within a repeat."""
    offset_sd: float = 0.0
    """Standard deviation of the per-repeat factor 1 + o_r."""
    acceptance_icc: float = 0.0
    """Intra-prompt correlation of acceptance: the share of its variance between prompts."""

    def __post_init__(self) -> None:
        if self.cv < 0 or self.offset_sd < 0:
            raise ValueError(f"cv and offset_sd must be >= 0, got {self.cv}, {self.offset_sd}")
        if not -1 < self.rho < 1:
            raise ValueError(f"rho must lie in (-1, 1), got {self.rho}")
        if not 0 <= self.acceptance_icc < 1:
            raise ValueError(f"acceptance_icc must lie in [0, 1), got {self.acceptance_icc}")


def lognormal_factors(rng: np.random.Generator, n: int, cv: float) -> FloatArray:
    """``n`` independent log-normal factors with mean 1 and coefficient of variation ``cv``."""
    if cv == 0:
        return np.ones(n)
    s2 = math.log1p(cv * cv)
    return np.exp(rng.normal(-s2 / 2, math.sqrt(s2), n))


def ar1_factors(rng: np.random.Generator, n: int, cv: float, rho: float) -> FloatArray:
    """``n`` stationary log-normal AR(1) factors: mean 1, CV ``cv``, lag-1 autocorrelation ``rho``.

    For x Gaussian AR(1) with variance s^2 and coefficient phi, exp(x) has
    lag-1 autocorrelation (exp(phi s^2) - 1) / (exp(s^2) - 1); with
    s^2 = ln(1 + cv^2) that is ``rho`` when phi = ln(1 + rho cv^2) / s^2.
    The series starts from the stationary law, so no burn-in is needed.
    """
    if cv == 0:
        return np.ones(n)
    s2 = math.log1p(cv * cv)
    phi = math.log1p(rho * cv * cv) / s2
    innovations = rng.normal(0.0, math.sqrt(s2 * (1 - phi * phi)), n)
    x = np.empty(n)
    x[0] = rng.normal(0.0, math.sqrt(s2))
    for t in range(1, n):
        x[t] = phi * x[t - 1] + innovations[t]
    return np.exp(x - s2 / 2)


def noisy_accepted(
    rng: np.random.Generator,
    proposed: Sequence[int],
    accepted: Sequence[int],
    batch_size: int,
    icc: float,
) -> tuple[int, ...]:
    """Accepted counts redrawn around a per-repeat rate (the module docstring's Beta-binomial).

    The rate accepted/proposed of each position is drawn from a Beta with
    the sample's rate as mean and ``icc * p (1 - p) / batch_size`` as
    variance (``batch_size`` independent prompts average their offsets),
    then ``Binomial(proposed, rate)``. A position with no proposal, or a
    rate of exactly 0 or 1 (no spread to scale), keeps its count.
    """
    out = []
    concentration = batch_size / icc - 1.0 if icc > 0 else math.inf
    for n, a in zip(proposed, accepted, strict=True):
        p = a / n if n else 0.0
        if n == 0 or not 0 < p < 1 or not math.isfinite(concentration):
            out.append(int(a))
            continue
        rate = rng.beta(p * concentration, (1 - p) * concentration)
        out.append(int(rng.binomial(n, rate)))
    return tuple(out)


class NoisyBackend:
    """A noise-free ``SimBackend`` measured through ``NoiseModel`` (MODELLED figures).

    Only ``measure`` (the search's cells) is noised through the model;
    baselines and context cells are passed through noised the same way so
    that a search asking for them sees the same kind of engine.
    ``spent_seconds`` is the inner backend's engine time (warm-up and
    prefill included) with the noise's change to the counted steps added.
    """

    name = "sim"
    source = Source.MODELLED

    def __init__(self, inner: SimBackend, noise: NoiseModel, *, seed: int) -> None:
        if inner.jitter != 0:
            raise ValueError("wrap a noise-free SimBackend (jitter=0): the model is the noise")
        self.inner = inner
        self.noise = noise
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0A51]))
        self._extra_seconds = 0.0

    @property
    def spent_seconds(self) -> float:
        """Simulated engine seconds over every call, warm-up included, noise applied."""
        return self.inner.spent_seconds + self._extra_seconds

    def fingerprint(self) -> Fingerprint:
        return self.inner.fingerprint()

    def default_prompt_tokens(self) -> int:
        return self.inner.default_prompt_tokens()

    def measure(
        self, batch_size: int, k: int, steps: int, *, prompt_tokens: int | None = None
    ) -> CellSample:
        """The inner cell with the step times and accepted counts noised."""
        return self._noised(self.inner.measure(batch_size, k, steps, prompt_tokens=prompt_tokens))

    def measure_at_context(
        self, batch_size: int, k: int, steps: int, prompt_tokens: int
    ) -> CellSample:
        return self._noised(self.inner.measure_at_context(batch_size, k, steps, prompt_tokens))

    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        return self._noised(self.inner.measure_baseline(batch_size, steps))

    def close(self) -> None:
        self.inner.close()

    def _noised(self, sample: CellSample) -> CellSample:
        clean = np.asarray(sample.step_seconds, dtype=np.float64)
        offset = lognormal_factors(self._rng, 1, self.noise.offset_sd)[0]
        seconds = clean * offset * ar1_factors(self._rng, clean.size, self.noise.cv, self.noise.rho)
        self._extra_seconds += float(seconds.sum() - clean.sum())
        accepted = tuple(sample.accepted)
        if self.noise.acceptance_icc > 0 and sample.k > 0:
            proposed = sample.drafted if sample.proposed is None else sample.proposed
            accepted = noisy_accepted(
                self._rng, proposed, accepted, sample.batch_size, self.noise.acceptance_icc
            )
        return CellSample(
            batch_size=sample.batch_size,
            k=sample.k,
            step_seconds=tuple(float(s) for s in seconds),
            drafted=sample.drafted,
            accepted=accepted,
            proposed=sample.proposed,
            offered=sample.offered,
            scheduled=sample.scheduled,
            sequence_steps=sample.sequence_steps,
            verified_tokens=sample.verified_tokens,
            context_tokens=sample.context_tokens,
        )


# --- fitting from a raw file ----------------------------------------------------------


def split_repeats(step_seconds: Sequence[float], repeats: int, steps: int) -> list[FloatArray]:
    """A raw cell's pooled step times cut back into its repeats.

    The raw file pools a cell's steps; its first repeat always runs
    ``steps`` (the sampling's base), and the file does not say how long the
    later ones were, so they are taken as equal shares of the rest (exact
    for the shipped file, whose every repeat ran ``steps``). A rest that
    does not split evenly is refused rather than guessed.
    """
    times = np.asarray(step_seconds, dtype=np.float64)
    if repeats < 1 or times.size < repeats:
        raise ValueError(f"{times.size} steps cannot hold {repeats} repeats")
    if repeats == 1:
        return [times]
    first, rest = times[:steps], times[steps:]
    if rest.size % (repeats - 1):
        raise ValueError(
            f"{rest.size} steps after the first repeat do not split {repeats - 1} ways"
        )
    return [first, *np.split(rest, repeats - 1)]


@cache
def _centred_traces(n: int, rho: float) -> tuple[float, float]:
    """(tr(C R), tr(C L C R)) for n AR(1) steps: expected centred sum of squares and of
    lag-1 products per unit variance (C centres, R the correlation, L the lag-1 pairs)."""
    idx = np.arange(n)
    corr = rho ** np.abs(idx[:, None] - idx[None, :])
    centre = np.eye(n) - 1.0 / n
    lag = np.eye(n, k=1)
    cr = centre @ corr
    return float(np.trace(cr)), float(np.trace(centre @ lag @ cr))


def _relative_deviations(repeats: Sequence[FloatArray]) -> list[FloatArray]:
    return [
        np.asarray(r, dtype=np.float64) / float(np.mean(r)) - 1.0 for r in repeats if r.size > 2
    ]


def _expected_lag1(lengths: Sequence[int], rho: float) -> float:
    traces = [_centred_traces(n, round(rho, 6)) for n in lengths]
    return sum(t[1] for t in traces) / sum(t[0] for t in traces)


def fit_ar1(repeats: Sequence[FloatArray]) -> tuple[float, float]:
    """(CV, rho) of a set of repeats' step times, corrected for short-series bias.

    Each repeat's steps are taken relative to its own mean (an offset per
    repeat is not step noise). The pooled lag-1 statistic sum(x_t x_t+1) /
    sum(x_t^2) is matched to its expectation under AR(1) by bisection, and
    the pooled sum of squares is divided by its expectation under the rho
    found (module docstring).
    """
    devs = _relative_deviations(repeats)
    if not devs:
        raise ValueError("need a repeat of at least 3 steps")
    lengths = [d.size for d in devs]
    squares = sum(float(d @ d) for d in devs)
    observed = sum(float(d[1:] @ d[:-1]) for d in devs) / squares
    lo, hi = -0.95, 0.95
    if observed <= _expected_lag1(lengths, lo):
        rho = lo
    elif observed >= _expected_lag1(lengths, hi):
        rho = hi
    else:
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _expected_lag1(lengths, mid) < observed else (lo, mid)
        rho = (lo + hi) / 2
    expected = sum(_centred_traces(n, round(rho, 6))[0] for n in lengths)
    return math.sqrt(squares / expected), rho


def mean_variance_inflation(n: int, rho: float) -> float:
    """n Var(mean of n AR(1) steps) / sigma^2: 1 + 2 sum_k (1 - k/n) rho^k."""
    k = np.arange(1, n)
    return float(1.0 + 2.0 * np.sum((1.0 - k / n) * rho**k))


def offset_variance(repeats: Sequence[FloatArray], rho: float) -> float | None:
    """One cell's between-repeat variance of relative means beyond the within-repeat noise.

    ``Var(repeat means) / mean^2 - CV_w^2 * inflation / n``, the second term
    what AR(1) noise of the cell's own within-repeat CV (corrected with
    ``rho``) would put between repeat means of n steps. May be negative (a
    sample estimate); None for a single repeat.
    """
    if len(repeats) < 2:
        return None
    means = np.array([float(np.mean(r)) for r in repeats])
    between = float(np.var(means / means.mean(), ddof=1))
    devs = _relative_deviations(repeats)
    squares = sum(float(d @ d) for d in devs)
    within = squares / sum(_centred_traces(d.size, round(rho, 6))[0] for d in devs)
    explained = float(
        np.mean([within * mean_variance_inflation(r.size, rho) / r.size for r in repeats])
    )
    return between - explained


def fit_offset_sd(cells: Sequence[Sequence[FloatArray]], rho: float) -> tuple[float, list[float]]:
    """The per-repeat offset's sd pooled over cells with >= 2 repeats, and each cell's variance.

    Pooled as the mean of the cells' excess variances weighted by their
    degrees of freedom (repeats - 1), truncated at 0 only after pooling so
    that noise in either direction cancels.
    """
    per_cell: list[float] = []
    weights: list[int] = []
    for repeats in cells:
        v = offset_variance(repeats, rho)
        if v is not None:
            per_cell.append(v)
            weights.append(len(repeats) - 1)
    if not per_cell:
        raise ValueError("no cell has two repeats: the offset cannot be separated")
    pooled = float(np.average(per_cell, weights=weights))
    return math.sqrt(max(pooled, 0.0)), per_cell


@dataclass(frozen=True)
class AcceptanceCell:
    """One cell's position-1 counts and how many independent prompts they came from."""

    reached: int
    accepted: int
    prompts: int
    """Sequences times repeats: each sequence of each repeat decodes its own prompt."""


def fit_acceptance_icc(cells: Sequence[AcceptanceCell]) -> float:
    """Intra-prompt correlation of acceptance from cells' rates, by moments.

    With a prompt's rate drawn with variance icc p(1-p) and its steps
    Bernoulli around it, a cell of n sequence-steps over g prompts has
    Var(rate) = p(1-p)/n + icc p(1-p) (1/g - 1/n). Solved for icc from the
    cells' squared deviations from the pooled rate (times C/(C-1) for the
    estimated mean), clipped to [0, 0.99].
    """
    used = [c for c in cells if c.reached > 0 and c.prompts > 0]
    if len(used) < 2:
        raise ValueError("need two cells with reached counts")
    p = sum(c.accepted for c in used) / sum(c.reached for c in used)
    if not 0 < p < 1:
        return 0.0
    pq = p * (1 - p)
    excess = sum((c.accepted / c.reached - p) ** 2 - pq / c.reached for c in used)
    excess *= len(used) / (len(used) - 1)
    spread = sum(pq * (1 / c.prompts - 1 / c.reached) for c in used)
    return float(min(max(excess / spread, 0.0), 0.99)) if spread > 0 else 0.0


@dataclass(frozen=True)
class FittedNoise:
    """What ``fit_raw`` found, with the cells it used (JSON-ready via ``as_dict``)."""

    timing_cv: float
    timing_rho: float
    all_cells_cv: float
    all_cells_rho: float
    offset_sd: float
    offset_variance_per_cell: dict[str, float]
    acceptance_icc: float
    acceptance_rate_per_cell: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "timingCv": round(self.timing_cv, 4),
            "timingRho": round(self.timing_rho, 4),
            "allCellsCv": round(self.all_cells_cv, 4),
            "allCellsRho": round(self.all_cells_rho, 4),
            "offsetSd": round(self.offset_sd, 4),
            "offsetVariancePerCell": {
                k: round(v, 5) for k, v in self.offset_variance_per_cell.items()
            },
            "acceptanceIcc": round(self.acceptance_icc, 4),
            "acceptanceRatePerCell": {
                k: round(v, 4) for k, v in self.acceptance_rate_per_cell.items()
            },
        }


def fit_raw(raw: Mapping[str, Any]) -> FittedNoise:
    """The noise model's parameters from a profiler ``--raw`` file (module docstring).

    Step-time CV and rho from the K=0 cells: with no drafts every step
    does the same work, so their spread is timing noise only (a K>0 cell's
    steps also differ by how many tokens each verifies: that is signal,
    reported separately as ``all_cells_*``). The offset needs cells with two
    or more repeats, which in the shipped file are K>0 cells only; it uses
    each such cell's own within-repeat spread, so the drafting-driven part
    of it is explained away, and the all-cells rho. Acceptance from
    position 1 (the most counts): reached is every sequence-step (steps x
    batch size, as ``rederive`` reconstructs it for files that predate the
    reached counts), accepted as recorded.
    """
    steps = int(raw["sampling"]["steps"])
    split: dict[str, tuple[int, list[FloatArray]]] = {}
    accept: dict[str, AcceptanceCell] = {}
    for cell in raw["cells"]:
        name = f"bs{cell['batchSize']}-k{cell['k']}"
        repeats = split_repeats(cell["stepSeconds"], int(cell["repeats"]), steps)
        split[name] = (int(cell["k"]), repeats)
        if cell["k"] > 0 and cell.get("accepted"):
            reached = len(cell["stepSeconds"]) * int(cell["batchSize"])
            prompts = int(cell["batchSize"]) * int(cell["repeats"])
            accept[name] = AcceptanceCell(reached, int(cell["accepted"][0]), prompts)
    timing = [r for k, reps in split.values() if k == 0 for r in reps]
    everything = [r for _, reps in split.values() for r in reps]
    timing_cv, timing_rho = fit_ar1(timing)
    all_cv, all_rho = fit_ar1(everything)
    multi = {name: reps for name, (_, reps) in split.items() if len(reps) >= 2}
    offset_sd, per_cell = fit_offset_sd(list(multi.values()), all_rho)
    return FittedNoise(
        timing_cv=timing_cv,
        timing_rho=timing_rho,
        all_cells_cv=all_cv,
        all_cells_rho=all_rho,
        offset_sd=offset_sd,
        offset_variance_per_cell=dict(zip(multi, per_cell, strict=True)),
        acceptance_icc=fit_acceptance_icc(list(accept.values())),
        acceptance_rate_per_cell={n: c.accepted / c.reached for n, c in accept.items()},
    )
