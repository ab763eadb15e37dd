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
    AcceptanceCell,
    NoiseModel,
    NoisyBackend,
    ar1_factors,
    fit_acceptance_icc,
    fit_ar1,
    fit_offset_sd,
    fit_raw,
    lognormal_factors,
    mean_variance_inflation,
    noisy_accepted,
    split_repeats,
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


@pytest.mark.parametrize("offset", [0.0, 0.05, 0.15])
def test_fit_offset_sd_recovers_the_per_repeat_offset(offset: float) -> None:
    rng = np.random.default_rng(8)
    cells = [
        [lognormal_factors(rng, 1, offset)[0] * ar1_factors(rng, 16, 0.15, 0.5) for _ in range(2)]
        for _ in range(3000)
    ]
    fitted, per_cell = fit_offset_sd(cells, rho=0.5)
    assert len(per_cell) == 3000
    if offset == 0:
        assert fitted < 0.015
    else:
        assert fitted == pytest.approx(offset, rel=0.15)


def test_fit_offset_sd_needs_two_repeats() -> None:
    with pytest.raises(ValueError, match="two repeats"):
        fit_offset_sd([[np.ones(16)]], rho=0.5)


@pytest.mark.parametrize("icc", [0.0, 0.3, 0.8])
def test_fit_acceptance_icc_recovers_the_intra_prompt_correlation(icc: float) -> None:
    """Cells of bs prompts x 16 steps, each prompt's rate Beta around 0.3 with that ICC."""
    rng = np.random.default_rng(9)
    p, steps, cells = 0.3, 16, []
    for _ in range(1500):
        bs = int(rng.choice([1, 4, 16]))
        rates = rng.beta(p * (1 / icc - 1), (1 - p) * (1 / icc - 1), bs) if icc else [p] * bs
        accepted = int(sum(rng.binomial(steps, r) for r in rates))
        cells.append(AcceptanceCell(reached=bs * steps, accepted=accepted, prompts=bs))
    assert fit_acceptance_icc(cells) == pytest.approx(icc, abs=0.04)


def test_noisy_accepted_keeps_the_mean_and_adds_the_between_prompt_variance() -> None:
    rng = np.random.default_rng(10)
    proposed, p, bs, icc = 4000, 0.7, 8, 0.5
    draws = np.array(
        [noisy_accepted(rng, [proposed], [int(p * proposed)], bs, icc)[0] for _ in range(4000)]
    )
    rates = draws / proposed
    assert draws.max() <= proposed
    assert rates.mean() == pytest.approx(p, abs=0.003)
    expected = icc * p * (1 - p) / bs + p * (1 - p) / proposed
    assert rates.var() == pytest.approx(expected, rel=0.1)
    # nothing to spread: no proposal, or a certain rate, keeps its count
    assert noisy_accepted(rng, [0, 10, 10], [0, 10, 0], bs, icc) == (0, 10, 0)


def test_noisy_backend_scales_the_clean_steps_by_a_per_repeat_offset() -> None:
    """Same seed, same clean trace: the ratio noisy/clean is the noise alone."""
    preset = get_preset("seed-dense")
    clean = SimBackend(preset, seed=4, jitter=0.0)
    noisy = NoisyBackend(
        SimBackend(preset, seed=4, jitter=0.0), NoiseModel(cv=0.0, offset_sd=0.2), seed=4
    )
    ratios = []
    for _ in range(3):
        a, b = clean.measure(2, 1, 8), noisy.measure(2, 1, 8)
        ratio = np.asarray(b.step_seconds) / np.asarray(a.step_seconds)
        assert np.ptp(ratio) < 1e-9  # one offset per repeat, no step noise at cv 0
        ratios.append(ratio[0])
        assert b.drafted == a.drafted and b.accepted == a.accepted
    assert len({round(r, 9) for r in ratios}) == 3  # a fresh offset each repeat


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


def test_split_repeats() -> None:
    parts = split_repeats(list(range(1, 33)), 2, 16)
    assert [p.tolist() for p in parts] == [list(range(1, 17)), list(range(17, 33))]
    assert [p.size for p in split_repeats(list(range(1, 49)), 3, 16)] == [16, 16, 16]
    with pytest.raises(ValueError, match="split"):
        split_repeats(list(range(1, 40)), 3, 16)


def test_fit_raw_on_the_shipped_file_is_what_the_results_record() -> None:
    fitted = fit_raw(json.loads(RAW.read_text()))
    # K=0 cells of a shared 2-core CPU: a few percent of timing noise, mildly correlated
    assert 0.04 < fitted.timing_cv < 0.15
    assert 0.0 <= fitted.timing_rho < 0.6
    assert set(fitted.offset_variance_per_cell) == {"bs1-k2", "bs1-k3", "bs4-k2", "bs4-k3"}
    per_cell = list(fitted.offset_variance_per_cell.values())
    assert math.isclose(fitted.offset_sd**2, max(float(np.mean(per_cell)), 0.0))  # 2 repeats each
    assert fitted.acceptance_icc > 0.5  # n-gram: a prompt repeats itself or it does not
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
