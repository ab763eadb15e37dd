"""bench/search_noise.py: the noise model makes what it is asked for, the fitter finds it back.

The generator is checked on long series (its law, not a sample's luck); the
fitter on many short synthetic repeats shaped like the raw file's (16
steps, one or two repeats per cell), where the parameters are known.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from bench.profiler_search import ROOT, dumps, measured_only_loss, summarise_noise
from bench.search_noise import (
    NoiseModel,
    NoisyBackend,
    RawRun,
    ar1_factors,
    fit_ar1,
    fit_paired_acceptance,
    fit_paired_offsets,
    fit_raw,
    lognormal_factors,
    mean_variance_inflation,
    noisy_accepted,
    raw_runs,
)
from specdeploy.runtime.profiler.sim_backend import SimBackend
from specdeploy.runtime.sim.presets import get_preset

RAW = ROOT / "profiles/smollm2-135m-ngram-cpu.raw.json"


def _lag1(x: np.ndarray) -> float:
    d = x - x.mean()
    return float(d[1:] @ d[:-1] / (d @ d))


@pytest.mark.parametrize(("cv", "rho"), [(0.1, 0.5), (0.2, 0.5), (0.3, 0.5), (0.3, 0.0)])
def test_ar1_factors_have_the_requested_law(cv: float, rho: float) -> None:
    x = ar1_factors(np.random.default_rng(11), 200_000, cv, rho)
    assert x.min() > 0
    assert x.mean() == pytest.approx(1.0, abs=0.005)
    assert x.std() / x.mean() == pytest.approx(cv, rel=0.03)
    assert _lag1(x) == pytest.approx(rho, abs=0.015)


def test_lognormal_factors_mean_one_and_cv() -> None:
    x = lognormal_factors(np.random.default_rng(3), 200_000, 0.16)
    assert x.mean() == pytest.approx(1.0, abs=0.002)
    assert x.std() == pytest.approx(0.16, rel=0.02)
    assert set(lognormal_factors(np.random.default_rng(3), 5, 0.0)) == {1.0}


@pytest.mark.parametrize(("cv", "rho"), [(0.1, 0.5), (0.08, 0.2), (0.3, 0.5), (0.2, 0.0)])
def test_fit_ar1_recovers_cv_and_rho_from_short_repeats(cv: float, rho: float) -> None:
    rng = np.random.default_rng(5)
    repeats = [ar1_factors(rng, 16, cv, rho) * rng.uniform(0.05, 1.0) for _ in range(2000)]
    fitted_cv, fitted_rho = fit_ar1(repeats)
    assert fitted_cv == pytest.approx(cv, rel=0.05)
    assert fitted_rho == pytest.approx(rho, abs=0.03)


def test_the_short_series_correction_matters() -> None:
    """Naive lag-1 on 16-step repeats is biased by about (1 + 3 rho) / n; the fit is not."""
    rng = np.random.default_rng(6)
    repeats = [ar1_factors(rng, 16, 0.1, 0.5) for _ in range(2000)]
    naive = float(np.mean([_lag1(r) for r in repeats]))
    assert naive < 0.5 - 0.1
    assert fit_ar1(repeats)[1] == pytest.approx(0.5, abs=0.03)


def test_mean_variance_inflation_by_hand() -> None:
    assert mean_variance_inflation(16, 0.0) == 1.0
    # n = 3: 1 + 2 (2/3 rho + 1/3 rho^2)
    assert mean_variance_inflation(3, 0.5) == pytest.approx(1 + 2 * (2 / 3 * 0.5 + 1 / 3 * 0.25))
    # long series: (1 + rho) / (1 - rho)
    assert mean_variance_inflation(100_000, 0.5) == pytest.approx(3.0, rel=1e-3)


def _synthetic_runs(
    rng: np.random.Generator,
    *,
    shared_sd: float,
    unshared_sd: float,
    shared_icc: float,
    unshared_icc: float,
    cv: float = 0.1,
    rho: float = 0.5,
    groups: int = 300,
) -> list[RawRun]:
    """Batch sizes of 3 paired rows (K=0, 1, 2) x 3 repeats, 64 steps, 40 prompts a run:
    log-normal paired and unshared offsets, AR(1) steps, acceptance shifted by a paired
    and an unshared normal deviation (``noisy_accepted``'s law)."""
    runs = []
    for bs in range(1, groups + 1):
        for r in range(3):
            a = float(lognormal_factors(rng, 1, shared_sd)[0])
            z = float(rng.standard_normal())
            for k in range(3):
                e = float(lognormal_factors(rng, 1, unshared_sd)[0])
                steps = (1 + 0.1 * k) * a * e * ar1_factors(rng, 64, cv, rho)
                p, n, g = 0.6, 400, 40
                shift = math.sqrt(shared_icc) * z + math.sqrt(unshared_icc) * rng.standard_normal()
                rate = min(max(p + shift * math.sqrt(p * (1 - p) / g), 0.0), 1.0)
                runs.append(
                    RawRun(
                        bs,
                        k,
                        False,
                        r,
                        steps,
                        n if k else 0,
                        int(rng.binomial(n, rate)) if k else 0,
                        g,
                    )
                )
    return runs


@pytest.mark.parametrize(
    ("shared", "unshared"), [(0.0, 0.0), (0.08, 0.0), (0.0, 0.06), (0.07, 0.06)]
)
def test_fit_paired_offsets_separates_the_shared_from_the_unshared(
    shared: float, unshared: float
) -> None:
    runs = _synthetic_runs(
        np.random.default_rng(5),
        shared_sd=shared,
        unshared_sd=unshared,
        shared_icc=0,
        unshared_icc=0,
    )
    fit = fit_paired_offsets(runs, rho=0.5)
    assert fit.shared_var == pytest.approx(shared**2, abs=0.0012)
    assert fit.unshared_var == pytest.approx(unshared**2, abs=0.0008)


@pytest.mark.parametrize(("shared", "unshared"), [(0.0, 0.0), (0.6, 0.0), (0.3, 0.3)])
def test_fit_paired_acceptance_separates_the_shared_from_the_unshared(
    shared: float, unshared: float
) -> None:
    runs = _synthetic_runs(
        np.random.default_rng(6),
        shared_sd=0,
        unshared_sd=0,
        shared_icc=shared,
        unshared_icc=unshared,
    )
    fit = fit_paired_acceptance(runs)
    assert fit.shared_var == pytest.approx(shared, abs=0.15)
    assert fit.unshared_var == pytest.approx(unshared, abs=0.12)


def test_paired_fits_need_two_paired_repeats() -> None:
    one = [RawRun(1, k, False, 0, np.ones(16), 10, 5, 32) for k in (1, 2)]
    with pytest.raises(ValueError, match="two"):
        fit_paired_offsets(one, rho=0.5)
    with pytest.raises(ValueError, match="two"):
        fit_paired_acceptance(one)


def test_noisy_accepted_keeps_the_mean_and_adds_the_between_prompt_variance() -> None:
    rng = np.random.default_rng(10)
    proposed, p, prompts, icc = 4000, 0.7, 32, 0.5
    draws = np.array(
        [noisy_accepted(rng, [proposed], [int(p * proposed)], prompts, icc)[0] for _ in range(4000)]
    )
    rates = draws / proposed
    assert draws.max() <= proposed
    assert rates.mean() == pytest.approx(p, abs=0.003)
    expected = icc * p * (1 - p) / prompts + p * (1 - p) / proposed
    assert rates.var() == pytest.approx(expected, rel=0.1)
    # nothing to spread: no proposal, or a certain rate, keeps its count
    assert noisy_accepted(rng, [0, 10, 10], [0, 10, 0], prompts, icc) == (0, 10, 0)


def test_noisy_accepted_shared_deviation_moves_every_caller_alike() -> None:
    """Only the paired part: the same z shifts two cells' rates the same way."""
    rng = np.random.default_rng(3)
    up = noisy_accepted(rng, [100_000], [50_000], 32, 0.0, shared_icc=0.5, shared_z=2.0)[0]
    down = noisy_accepted(rng, [100_000], [50_000], 32, 0.0, shared_icc=0.5, shared_z=-2.0)[0]
    shift = 2.0 * math.sqrt(0.5 * 0.25 / 32)
    assert up / 100_000 == pytest.approx(0.5 + shift, abs=0.005)
    assert down / 100_000 == pytest.approx(0.5 - shift, abs=0.005)


def test_noise_model_averages_acceptance_over_at_least_min_prompts() -> None:
    model = NoiseModel(cv=0.1)
    assert [model.prompts(b) for b in (1, 16, 32, 64)] == [32, 32, 32, 64]


def test_noisy_backend_pairs_every_k_and_the_baseline_per_batch_size_and_repeat() -> None:
    """Paired offset only (cv 0, no unshared part): the r-th run of every K and the r-th
    baseline at a batch size get the same factor; another repeat or batch size another."""
    preset = get_preset("seed-dense")
    clean = SimBackend(preset, seed=4, jitter=0.0)
    noisy = NoisyBackend(
        SimBackend(preset, seed=4, jitter=0.0), NoiseModel(cv=0.0, shared_offset_sd=0.2), seed=4
    )

    def factor(measure: Any, *args: int) -> float:
        a, b = getattr(clean, measure)(*args), getattr(noisy, measure)(*args)
        ratio = np.asarray(b.step_seconds) / np.asarray(a.step_seconds)
        assert np.ptp(ratio) < 1e-9
        return float(ratio[0])

    first = [
        factor("measure", 4, 1, 8),
        factor("measure", 4, 2, 8),
        factor("measure_baseline", 4, 8),
    ]
    assert first[0] == pytest.approx(first[1]) == pytest.approx(first[2])
    second = [
        factor("measure", 4, 2, 8),
        factor("measure", 4, 1, 8),
        factor("measure_baseline", 4, 8),
    ]
    assert second[0] == pytest.approx(second[1]) == pytest.approx(second[2])
    assert second[0] != pytest.approx(first[0])
    assert factor("measure", 8, 1, 8) != pytest.approx(first[0])
    # the draw is the key's, not the order's: a fresh backend measuring K=2 first agrees
    again = NoisyBackend(
        SimBackend(preset, seed=4, jitter=0.0), NoiseModel(cv=0.0, shared_offset_sd=0.2), seed=4
    )
    assert again.paired((4, 0))[0] == pytest.approx(first[0])


def test_noisy_backend_scales_the_clean_steps_by_an_unshared_offset_per_run() -> None:
    preset = get_preset("seed-dense")
    clean = SimBackend(preset, seed=4, jitter=0.0)
    noisy = NoisyBackend(
        SimBackend(preset, seed=4, jitter=0.0), NoiseModel(cv=0.0, offset_sd=0.2), seed=4
    )
    ratios = []
    for _ in range(3):
        a, b = clean.measure(2, 1, 8), noisy.measure(2, 1, 8)
        ratio = np.asarray(b.step_seconds) / np.asarray(a.step_seconds)
        assert np.ptp(ratio) < 1e-9
        ratios.append(ratio[0])
        assert b.drafted == a.drafted and b.accepted == a.accepted
    assert len({round(r, 9) for r in ratios}) == 3


def test_noisy_backend_spent_seconds_follow_the_noise() -> None:
    preset = get_preset("seed-dense")
    noisy = NoisyBackend(SimBackend(preset, seed=1, jitter=0.0), NoiseModel(cv=0.2), seed=1)
    clean_total = noisy_total = 0.0
    clean = SimBackend(preset, seed=1, jitter=0.0)
    for _ in range(2):
        clean_total += sum(clean.measure(4, 2, 16).step_seconds)
        noisy_total += sum(noisy.measure(4, 2, 16).step_seconds)
    assert noisy.inner.spent_seconds == pytest.approx(clean.spent_seconds)
    assert noisy.spent_seconds - clean.spent_seconds == pytest.approx(noisy_total - clean_total)


def test_noisy_backend_refuses_a_jittered_inner_backend() -> None:
    with pytest.raises(ValueError, match="jitter=0"):
        NoisyBackend(SimBackend(get_preset("seed-dense")), NoiseModel(cv=0.1), seed=0)


def test_fit_raw_on_the_shipped_file_is_what_the_results_record() -> None:
    raw = json.loads(RAW.read_text())
    runs = raw_runs(raw)
    assert {r.prompts for r in runs} >= {32} and min(r.prompts for r in runs) >= 32
    fitted = fit_raw(raw)
    # the serving regime's K=0 steps: ~16% spread, strongly correlated step to step
    assert 0.08 < fitted.timing_cv < 0.25
    assert 0.4 < fitted.timing_rho < 0.9
    assert set(fitted.offsets.per_batch_size) == {"bs4", "bs16"}  # bs 1 ran one repeat
    assert 0.0 < fitted.shared_offset_sd < 0.15 and 0.0 <= fitted.offset_sd < 0.15
    assert fitted.shared_acceptance_icc > 0.2  # the prompt set moves every K alike
    results = json.loads((ROOT / "bench/results/profiler_search.json").read_text())
    assert results["noise"]["fit"] == fitted.as_dict()


def _record(
    variant: str, cv: float, preset: str, seed: int, cost: float, loss: float
) -> dict[str, Any]:
    """A noise record as ``noise_record`` writes it, with only what the summary reads."""

    def run(c: float, lost: float) -> dict[str, Any]:
        return {
            "costVsExhaustive": c,
            "trueMaxLossAtProfiledSizes": lost,
            "trueMeanLossAllBatchSizes": lost / 2,
            "maxLossAtProfiledSizes": lost,
            "trueLossMeasuredOnly": lost / 4,
            "runs": 10,
            "misses": [],
        }

    return {
        "variant": variant,
        "cv": cv,
        "preset": preset,
        "seed": seed,
        "smart": run(cost, loss),
        "exhaustive": run(1.0, 0.001),
    }


def test_summarise_noise_takes_mean_and_worst_and_judges_the_worst() -> None:
    records = [
        _record("full", 0.1, "a", 1000, 0.10, 0.002),
        _record("full", 0.1, "b", 1000, 0.20, 0.008),
        _record("full", 0.2, "a", 1000, 0.10, 0.002),
        _record("full", 0.2, "b", 1000, 0.30, 0.020),
    ]
    low, high = summarise_noise(records)
    assert (low["cv"], high["cv"]) == (0.1, 0.2)
    assert low["costVsExhaustive"] == {"mean": 0.15, "worst": 0.2}
    assert low["trueLoss"] == {"mean": 0.005, "worst": 0.008}
    assert low["targetsMet"]
    assert not high["costTargetMet"] and not high["lossTargetMet"] and not high["targetsMet"]
    assert [p["preset"] for p in high["perPreset"]] == ["a", "b"]
    assert high["perPreset"][1]["trueLoss"] == 0.020


def test_measured_only_loss_by_hand() -> None:
    # batch sizes 1..2, K 0..2; best K 2 at bs 1 (goodput 10), K 0 at bs 2 (goodput 5)
    truth = np.array([[np.nan] * 3, [5.0, 8.0, 10.0], [5.0, 4.0, 2.0]])
    assert measured_only_loss(truth, ((1, 2), (2, 0))) == 0.0
    assert measured_only_loss(truth, ((1, 1), (2, 0))) == pytest.approx(0.2)
    assert measured_only_loss(truth, ((1, 1), (2, 2), (4, 0))) == pytest.approx(0.6)  # 4 > top


def test_dumps_writes_one_noise_record_per_line_and_round_trips() -> None:
    records = [
        _record("full", 0.1, "a", 1000, 0.1, 0.002),
        _record("full", 0.2, "b", 1001, 0.2, 0.0),
    ]
    document = {"summary": [{"x": 1}], "noise": {"fit": {"cv": 0.1}, "records": records}}
    text = dumps(document)
    assert json.loads(text) == document
    assert sum(line.startswith('  {"variant"') for line in text.splitlines()) == 2
    assert json.loads(dumps({"summary": []})) == {"summary": []}
