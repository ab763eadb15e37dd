"""A realistic measurement-noise model for ``bench/profiler_search.py``, fitted from a raw file.

The simulated backend's default noise (3% iid log-normal per step) is kinder
than a real engine: on the shipped CPU profile (``profiles/*.raw.json``)
step times spread by 5-30% per cell, consecutive steps are correlated, one
repeat's mean can sit far from another's (a different prompt set, a busy
neighbour), and acceptance varies from prompt to prompt far beyond the
binomial. A search whose intervals assume independent steps can be misled
by exactly those features, so the bench re-runs its targets under them.

The model (``NoiseModel``), applied to the noise-free simulator by
``NoisyBackend``, paired the way the vLLM backend measures (the r-th repeat
of every K, and the r-th plain baseline, at a batch size decode the same
prompts: ``vllm_backend._sequence_start(bs, repeat)``). Step t of run r of
(batch size b, K) takes ``true_t * A_{b,r} * E_run * (1 + e_t)``:

* ``1 + e_t``: stationary log-normal AR(1) with mean 1, marginal CV ``cv``
  and lag-1 autocorrelation ``rho`` (``ar1_factors``), a fresh series per run.
  Log-normal keeps every step positive and right-skewed, and the Gaussian
  coefficient is solved so that the *factor's* lag-1 autocorrelation is
  ``rho`` exactly.
* ``A_{b,r}``: the paired offset (the prompt set), one log-normal draw per
  (batch size, repeat index), mean 1, sd ``shared_offset_sd``, shared by
  every K and the baseline there; drawn from a generator seeded by the key,
  so the search's order does not change it.
* ``E_run``: the unshared offset (host, time), one draw per run, sd
  ``offset_sd``.
* acceptance: each run's rate accepted/proposed at every position moves by
  ``sqrt(p (1 - p) / g) * (sqrt(shared_icc) z_{b,r} + sqrt(icc) z_run)``
  with ``g = max(batch size, min_prompts)`` the prompts a repeat decodes (32
  at least, the vLLM backend's waves) and ``z_{b,r}`` the paired standard
  normal; clipped to [0, 1], then accepted ~ Binomial(proposed, rate). Only
  acceptance given a proposal moves, so proposals, verified tokens and the
  simulator's step times stay consistent with each other.

Context cells (other prompt lengths, other prompts) get paired draws of
their own. Every factor has mean 1 (acceptance up to the clip), so the
noise-free truth the bench scores against is still the truth of what the
noisy backend measures.

Fitting (``fit_raw``) reads the raw file's per-repeat runs (``engineRuns``:
steps, repeat index, prompts, counts). CV and rho (``fit_ar1``) come from
the K=0 runs' relative deviations ``y_t / mean_r - 1``, whose sample
statistics are biased on short repeats: the rho whose *expected* pooled
lag-1 statistic equals the observed one is solved for, and the pooled
variance divided by its expectation under that rho. The offsets
(``fit_paired_offsets``) and the acceptance over-dispersion
(``fit_paired_acceptance``) come from a two-way (cell x repeat) table per
batch size: the repeat (column) mean square beyond the residual is the
paired part, the residual beyond the runs' own sampling noise the unshared
part. Each has a unit test on synthetic runs with known parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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
    """Standard deviation of the unshared per-repeat factor (host, time): one draw per run."""
    shared_offset_sd: float = 0.0
    """Standard deviation of the paired per-repeat factor (the prompt set): one draw per
    (batch size, repeat index), shared by every K and the baseline there."""
    acceptance_icc: float = 0.0
    """Unshared between-prompt share of acceptance variance: one deviation per run."""
    shared_acceptance_icc: float = 0.0
    """Paired between-prompt share: one deviation per (batch size, repeat index)."""
    min_prompts: int = 32
    """Prompts a repeat decodes at least (``vllm_backend --min-prompts``): acceptance
    deviations average over max(batch size, min_prompts) prompts."""

    def __post_init__(self) -> None:
        if min(self.cv, self.offset_sd, self.shared_offset_sd) < 0:
            raise ValueError(f"cv and offset sds must be >= 0, got {self}")
        if not -1 < self.rho < 1:
            raise ValueError(f"rho must lie in (-1, 1), got {self.rho}")
        for icc in (self.acceptance_icc, self.shared_acceptance_icc):
            if not 0 <= icc < 1:
                raise ValueError(f"acceptance ICCs must lie in [0, 1), got {icc}")
        if self.min_prompts < 1:
            raise ValueError(f"min_prompts must be >= 1, got {self.min_prompts}")

    def prompts(self, batch_size: int) -> int:
        """Prompts one repeat at ``batch_size`` decodes (the vLLM backend's waves)."""
        return max(batch_size, self.min_prompts)


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
    prompts: int,
    icc: float,
    *,
    shared_icc: float = 0.0,
    shared_z: float = 0.0,
) -> tuple[int, ...]:
    """Accepted counts redrawn around a per-repeat rate (the module docstring's model).

    The rate accepted/proposed of each position moves by
    ``sqrt(p (1 - p) / prompts) * (sqrt(shared_icc) * shared_z + sqrt(icc) * z)``,
    ``shared_z`` the paired standard normal of the (batch size, repeat) and
    ``z`` this run's own (one draw for every position: an easy prompt set is
    easy at every depth), clipped to [0, 1]; then ``Binomial(proposed,
    rate)``. ``prompts`` independent prompts average their offsets. A
    position with no proposal, or a rate of exactly 0 or 1, keeps its count.
    """
    z = float(rng.standard_normal()) if icc > 0 else 0.0
    scale = math.sqrt(shared_icc) * shared_z + math.sqrt(icc) * z
    out = []
    for n, a in zip(proposed, accepted, strict=True):
        p = a / n if n else 0.0
        if n == 0 or not 0 < p < 1 or scale == 0:
            out.append(int(a))
            continue
        rate = min(max(p + scale * math.sqrt(p * (1 - p) / prompts), 0.0), 1.0)
        out.append(int(rng.binomial(n, rate)))
    return tuple(out)


class NoisyBackend:
    """A noise-free ``SimBackend`` measured through ``NoiseModel`` (MODELLED figures).

    Paired like the vLLM backend (``vllm_backend._sequence_start``): the
    r-th measurement of (batch size, K), and the r-th baseline at that batch
    size, decode the same prompts, so they share the paired step-time offset
    and acceptance deviation drawn for (batch size, r); the unshared offset
    and deviation, and the AR(1) series, are drawn per run. Context cells
    run other prompts (another length): their paired draws are their own,
    per (batch size, K, prompt length, r). ``spent_seconds`` is the inner
    backend's engine time (warm-up and prefill included) with the noise's
    change to the counted steps added.
    """

    name = "sim"
    source = Source.MODELLED

    def __init__(self, inner: SimBackend, noise: NoiseModel, *, seed: int) -> None:
        if inner.jitter != 0:
            raise ValueError("wrap a noise-free SimBackend (jitter=0): the model is the noise")
        self.inner = inner
        self.noise = noise
        self.seed = seed
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0A51]))
        self._extra_seconds = 0.0
        self._repeats: dict[tuple[Any, ...], int] = {}
        self._paired: dict[tuple[Any, ...], tuple[float, float]] = {}

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
        sample = self.inner.measure(batch_size, k, steps, prompt_tokens=prompt_tokens)
        if prompt_tokens is not None:
            return self._noised(sample, self._next(("ctx", batch_size, k, prompt_tokens)))
        return self._noised(sample, self._next(("cell", batch_size, k)))

    def measure_at_context(
        self, batch_size: int, k: int, steps: int, prompt_tokens: int
    ) -> CellSample:
        sample = self.inner.measure_at_context(batch_size, k, steps, prompt_tokens)
        return self._noised(sample, self._next(("ctx", batch_size, k, prompt_tokens)))

    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        sample = self.inner.measure_baseline(batch_size, steps)
        return self._noised(sample, self._next(("base", batch_size)))

    def close(self) -> None:
        self.inner.close()

    def _next(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """The paired key of this run: (batch size, repeat index), or a context's own."""
        repeat = self._repeats.get(key, 0)
        self._repeats[key] = repeat + 1
        if key[0] == "ctx":
            return (*key, repeat)
        return (key[1], repeat)

    def paired(self, key: tuple[Any, ...]) -> tuple[float, float]:
        """(step-time factor, acceptance z) shared by every run with this paired key.

        Drawn from a generator seeded by the key, so the draw does not depend
        on the order the search measures cells in."""
        if key not in self._paired:
            words = [self.seed, 0x9A1D] + [
                w if isinstance(w, int) else sum(map(ord, w)) for w in key
            ]
            rng = np.random.default_rng(np.random.SeedSequence(words))
            factor = float(lognormal_factors(rng, 1, self.noise.shared_offset_sd)[0])
            self._paired[key] = (factor, float(rng.standard_normal()))
        return self._paired[key]

    def _noised(self, sample: CellSample, key: tuple[Any, ...]) -> CellSample:
        noise = self.noise
        shared_factor, shared_z = self.paired(key)
        clean = np.asarray(sample.step_seconds, dtype=np.float64)
        offset = shared_factor * lognormal_factors(self._rng, 1, noise.offset_sd)[0]
        seconds = clean * offset * ar1_factors(self._rng, clean.size, noise.cv, noise.rho)
        self._extra_seconds += float(seconds.sum() - clean.sum())
        accepted = tuple(sample.accepted)
        if (noise.acceptance_icc > 0 or noise.shared_acceptance_icc > 0) and sample.k > 0:
            proposed = sample.drafted if sample.proposed is None else sample.proposed
            accepted = noisy_accepted(
                self._rng,
                proposed,
                accepted,
                noise.prompts(sample.batch_size),
                noise.acceptance_icc,
                shared_icc=noise.shared_acceptance_icc,
                shared_z=shared_z,
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


@dataclass(frozen=True)
class RawRun:
    """One engine run of a profiler raw file (``engineRuns``): one repeat of one cell."""

    batch_size: int
    k: int
    plain: bool
    repeat: int
    step_seconds: FloatArray
    proposed: int
    """Position-1 proposals (0 for K=0)."""
    accepted: int
    prompts: int
    """Distinct prompts the run decoded."""

    @property
    def row(self) -> str:
        """The run's cell as a row of its batch size's table: K, or the plain baseline."""
        return "plain" if self.plain else f"k{self.k}"


def raw_runs(raw: Mapping[str, Any]) -> list[RawRun]:
    """The per-repeat runs of a raw file (its ``engineRuns``, with their repeat index)."""
    runs = raw.get("engineRuns") or []
    if not runs or "repeat" not in runs[0]:
        raise ValueError("the raw file has no per-repeat engine runs with a repeat index")
    return [
        RawRun(
            batch_size=int(r["batchSize"]),
            k=int(r["k"]),
            plain=bool(r.get("plain", False)),
            repeat=int(r["repeat"]),
            step_seconds=np.asarray(r["stepSeconds"], dtype=np.float64),
            proposed=int(r["proposed"][0]) if r.get("proposed") else 0,
            accepted=int(r["accepted"][0]) if r.get("accepted") else 0,
            prompts=len(r.get("prompts") or []) or int(r["batchSize"]),
        )
        for r in runs
    ]


def paired_tables(
    runs: Sequence[RawRun], rows_of: Callable[[RawRun], bool] | None = None
) -> dict[int, list[list[RawRun]]]:
    """Per batch size, a balanced (row x repeat) table of runs.

    Rows are the cells (K, or the plain baseline) ``rows_of(run)`` admits;
    the columns are the repeat indices; kept: the largest set of repeats
    0..R-1 (R >= 2) that at least two rows have all of, and those rows.
    """
    tables: dict[int, list[list[RawRun]]] = {}
    for bs in sorted({r.batch_size for r in runs}):
        cells: dict[str, dict[int, RawRun]] = {}
        for r in runs:
            if r.batch_size == bs and (rows_of is None or rows_of(r)):
                cells.setdefault(r.row, {})[r.repeat] = r
        for width in range(max((len(c) for c in cells.values()), default=0), 1, -1):
            rows = sorted(n for n, c in cells.items() if all(j in c for j in range(width)))
            if len(rows) >= 2:
                tables[bs] = [[cells[n][j] for j in range(width)] for n in rows]
                break
    return tables


def two_way(table: FloatArray) -> tuple[float, float, int, int]:
    """(column mean square, residual mean square, column df, residual df) of an additive
    row + column fit without replication: E[MS_col] = s_res^2 + I s_col^2, E[MS_res] = s_res^2."""
    rows, cols = table.shape
    res = table - table.mean(1, keepdims=True) - table.mean(0, keepdims=True) + table.mean()
    df_res = (rows - 1) * (cols - 1)
    ms_col = rows * float(((table.mean(0) - table.mean()) ** 2).sum()) / (cols - 1)
    return ms_col, float((res**2).sum()) / df_res, cols - 1, df_res


def sampling_variance(steps: FloatArray, rho: float) -> float:
    """Variance of a run's log mean step time from its own AR(1) step noise: CV_w^2 x the
    AR(1) inflation / n, CV_w corrected for the short series' bias."""
    x = steps / steps.mean() - 1.0
    n = x.size
    cv2 = float(x @ x) / _centred_traces(n, round(rho, 6))[0]
    return float(cv2 * mean_variance_inflation(n, rho) / n)


@dataclass(frozen=True)
class PairedFit:
    """Shared and unshared variance components, pooled over batch sizes, with each one's."""

    shared_var: float
    unshared_var: float
    per_batch_size: dict[str, dict[str, float]]

    @property
    def shared_sd(self) -> float:
        return math.sqrt(max(self.shared_var, 0.0))

    @property
    def unshared_sd(self) -> float:
        return math.sqrt(max(self.unshared_var, 0.0))


def _pool(parts: list[tuple[float, int]]) -> float:
    weight = sum(df for _, df in parts)
    return float(sum(v * df for v, df in parts) / weight) if weight else 0.0


def fit_paired_offsets(runs: Sequence[RawRun], rho: float) -> PairedFit:
    """Per-repeat step-time offsets split into a paired and an unshared component.

    At each batch size the log mean step time of row i (a K, or the plain
    baseline) in repeat r is mu_i + a_r + e_ir + sampling noise: a_r the
    paired offset (the prompt set of (batch size, r), shared by every row),
    e_ir the unshared one (host, time). The two-way table's residual mean
    square estimates Var(e) + the runs' sampling variance (each run's own
    AR(1) noise, ``sampling_variance``, subtracted); its column mean square
    beyond the residual, divided by the rows, Var(a). Pooled over batch
    sizes by degrees of freedom; truncated at 0 only by the sds.
    """
    tables = paired_tables(runs)
    shared: list[tuple[float, int]] = []
    unshared: list[tuple[float, int]] = []
    detail: dict[str, dict[str, float]] = {}
    for bs, rows in tables.items():
        logs = np.array([[math.log(float(np.mean(r.step_seconds))) for r in row] for row in rows])
        flat = [r for row in rows for r in row]
        within = float(np.mean([sampling_variance(r.step_seconds, rho) for r in flat]))
        ms_col, ms_res, df_col, df_res = two_way(logs)
        a = (ms_col - ms_res) / len(rows)
        e = ms_res - within
        shared.append((a, df_col))
        unshared.append((e, df_res))
        detail[f"bs{bs}"] = {
            "rows": len(rows),
            "repeats": logs.shape[1],
            "sharedVar": a,
            "unsharedVar": e,
            "samplingVar": within,
        }
    if not tables:
        raise ValueError("no batch size has two cells with two repeats: offsets not separable")
    return PairedFit(_pool(shared), _pool(unshared), detail)


def fit_paired_acceptance(runs: Sequence[RawRun]) -> PairedFit:
    """Position-1 acceptance over-dispersion split into a paired and an unshared ICC.

    Each run's rate accepted/proposed, standardised by its cell's pooled
    sqrt(p (1 - p)), is mu_k + sqrt(icc_s / g) z_r + sqrt(icc_u / g) z_kr +
    binomial noise of variance 1/n (g prompts, n proposals): the same
    two-way table as the offsets, over K>0 rows. icc_s = g (MS_col -
    MS_res) / I, icc_u = g (MS_res - mean 1/n), g the mean prompts per run.
    Returned as variances-as-ICCs (``shared_var``, ``unshared_var``).
    """
    pooled: dict[tuple[int, int], float] = {}
    for key in {(r.batch_size, r.k) for r in runs if r.k > 0 and not r.plain}:
        mine = [r for r in runs if (r.batch_size, r.k) == key and not r.plain]
        pooled[key] = sum(r.accepted for r in mine) / max(sum(r.proposed for r in mine), 1)

    def standardised(r: RawRun) -> float:
        p = pooled[(r.batch_size, r.k)]
        return (r.accepted / r.proposed) / math.sqrt(p * (1 - p))

    tables = paired_tables(
        runs,
        rows_of=lambda r: (
            r.k > 0 and not r.plain and r.proposed > 0 and 0 < pooled[(r.batch_size, r.k)] < 1
        ),
    )
    shared: list[tuple[float, int]] = []
    unshared: list[tuple[float, int]] = []
    detail: dict[str, dict[str, float]] = {}
    for bs, rows in tables.items():
        x = np.array([[standardised(r) for r in row] for row in rows])
        flat = [r for row in rows for r in row]
        g = float(np.mean([r.prompts for r in flat]))
        binomial = float(np.mean([1.0 / r.proposed for r in flat]))
        ms_col, ms_res, df_col, df_res = two_way(x)
        s = g * (ms_col - ms_res) / len(rows)
        u = g * (ms_res - binomial)
        shared.append((s, df_col))
        unshared.append((u, df_res))
        detail[f"bs{bs}"] = {
            "rows": len(rows),
            "repeats": x.shape[1],
            "prompts": g,
            "sharedIcc": s,
            "unsharedIcc": u,
        }
    if not tables:
        raise ValueError("no batch size has two K>0 cells with two repeats")
    return PairedFit(_pool(shared), _pool(unshared), detail)


@dataclass(frozen=True)
class FittedNoise:
    """What ``fit_raw`` found (JSON-ready via ``as_dict``)."""

    timing_cv: float
    timing_rho: float
    all_cells_cv: float
    all_cells_rho: float
    offsets: PairedFit
    acceptance: PairedFit

    @property
    def offset_sd(self) -> float:
        return self.offsets.unshared_sd

    @property
    def shared_offset_sd(self) -> float:
        return self.offsets.shared_sd

    @property
    def acceptance_icc(self) -> float:
        return min(max(self.acceptance.unshared_var, 0.0), 0.99)

    @property
    def shared_acceptance_icc(self) -> float:
        return min(max(self.acceptance.shared_var, 0.0), 0.99)

    def as_dict(self) -> dict[str, Any]:
        def rounded(d: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
            return {k: {n: round(v, 5) for n, v in row.items()} for k, row in d.items()}

        return {
            "timingCv": round(self.timing_cv, 4),
            "timingRho": round(self.timing_rho, 4),
            "allCellsCv": round(self.all_cells_cv, 4),
            "allCellsRho": round(self.all_cells_rho, 4),
            "offsetSd": round(self.offset_sd, 4),
            "sharedOffsetSd": round(self.shared_offset_sd, 4),
            "offsetsPerBatchSize": rounded(self.offsets.per_batch_size),
            "acceptanceIcc": round(self.acceptance_icc, 4),
            "sharedAcceptanceIcc": round(self.shared_acceptance_icc, 4),
            "acceptancePerBatchSize": rounded(self.acceptance.per_batch_size),
        }


def fit_raw(raw: Mapping[str, Any]) -> FittedNoise:
    """The noise model's parameters from a profiler ``--raw`` file's per-repeat runs.

    Step-time CV and rho from the K=0 runs (no drafts: every step does the
    same work, so their spread is timing noise only; the plain baseline's
    runs included); ``all_cells_*`` over every run, for reference (a K>0
    run's steps also differ by what each verifies). The per-repeat offsets
    (``fit_paired_offsets``, with the K=0 rho) and the acceptance
    over-dispersion (``fit_paired_acceptance``) from the paired tables.
    """
    runs = raw_runs(raw)
    timing_cv, timing_rho = fit_ar1([r.step_seconds for r in runs if r.k == 0])
    all_cv, all_rho = fit_ar1([r.step_seconds for r in runs])
    return FittedNoise(
        timing_cv=timing_cv,
        timing_rho=timing_rho,
        all_cells_cv=all_cv,
        all_cells_rho=all_rho,
        offsets=fit_paired_offsets(runs, timing_rho),
        acceptance=fit_paired_acceptance(runs),
    )
