"""The sim profiler backend: a modelled SpeculationProfile that the profile model accepts."""

from __future__ import annotations

import pytest
import yaml

from specdeploy.runtime.goodput import FloatArray, acceptance_lengths
from specdeploy.runtime.profile import Source, SpeculationProfile, dump_profile, parse_profile
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.profiling import modelled_best_k, profile_cell, profile_preset

BATCHES = (1, 8, 64, 256)


def _best_k(al: FloatArray, itl_ms: dict[tuple[int, int], float], bs: int, max_k: int) -> int:
    goodput = [float(al[k]) / itl_ms[(bs, k)] for k in range(max_k + 1)]
    return goodput.index(max(goodput))


@pytest.fixture(scope="module")
def dense_profile() -> SpeculationProfile:
    return profile_preset(get_preset("seed-dense"), BATCHES, steps=48, seed=1)


def test_profile_validates_and_round_trips(dense_profile: SpeculationProfile) -> None:
    doc = dense_profile
    again = parse_profile(doc.to_document())
    assert again == doc
    assert parse_profile(yaml.safe_load(dump_profile(doc))) == doc
    assert doc.spec.source is Source.MODELLED
    assert doc.metadata.name == f"p-{doc.spec.fingerprint.digest()}"


def test_profile_has_every_cell_sorted_with_k0_everywhere(
    dense_profile: SpeculationProfile,
) -> None:
    rows = [(m.batch_size, m.k) for m in dense_profile.spec.measurements]
    assert rows == sorted(rows)
    assert rows == [(bs, k) for bs in BATCHES for k in range(6)]
    for m in dense_profile.spec.measurements:
        assert m.samples == 48
        assert (m.acceptance_length is None) == (m.k == 0)


def test_profile_fingerprint_is_the_presets(dense_profile: SpeculationProfile) -> None:
    fp = dense_profile.spec.fingerprint
    assert fp == get_preset("seed-dense").fingerprint()
    assert fp.gpu_type == "NVIDIA-H100-80GB-HBM3"
    assert fp.gpus_per_replica == 4
    assert fp.engine == "vllm-sim"


def test_profile_acceptance_comes_from_the_engines_counts(
    dense_profile: SpeculationProfile,
) -> None:
    preset = get_preset("seed-dense")
    rates = dense_profile.spec.acceptance.per_position
    assert len(rates) == preset.max_k
    assert rates == pytest.approx(preset.acceptance.nominal()[: preset.max_k], abs=0.03)
    assert dense_profile.spec.acceptance.samples and dense_profile.spec.acceptance.samples > 1000


def test_profile_itl_matches_the_cost_model_and_gives_the_seed_best_k(
    dense_profile: SpeculationProfile,
) -> None:
    preset = get_preset("seed-dense")
    cells = {(m.batch_size, m.k): m for m in dense_profile.spec.measurements}
    prompt = round(preset.workload.prompt.mean)
    for bs in BATCHES:
        # The context grows from the prompt while measuring: ITL within the step-time band.
        low = preset.cost.decode_itl(bs, 3, context=prompt) * 1e3
        high = preset.cost.decode_itl(bs, 3, context=prompt + 48 * 6) * 1e3
        assert low * 0.999 <= cells[(bs, 3)].itl_ms <= high * 1.001
    al = acceptance_lengths(dense_profile.spec.acceptance.per_position, preset.max_k)
    itl = {cell: m.itl_ms for cell, m in cells.items()}
    best = {bs: _best_k(al, itl, bs, preset.max_k) for bs in BATCHES}
    assert [best[bs] for bs in BATCHES] == sorted(best.values(), reverse=True)
    assert best[1] >= 3 and best[256] <= 1


def test_profile_subset_of_k_always_includes_zero() -> None:
    doc = profile_preset(get_preset("llama8b-ngram-a100"), (4, 2), ks=(2,), steps=16)
    assert [(m.batch_size, m.k) for m in doc.spec.measurements] == [(2, 0), (2, 2), (4, 0), (4, 2)]
    assert len(doc.spec.acceptance.per_position) == 2


def test_profile_rejects_k_beyond_max_k_and_bad_batch_sizes() -> None:
    preset = get_preset("seed-moe")
    with pytest.raises(ValueError, match="maxK"):
        profile_preset(preset, (1,), ks=(9,))
    with pytest.raises(ValueError, match="batch sizes"):
        profile_preset(preset, (0, 4))


def test_moe_profile_shows_the_non_monotonic_best_k() -> None:
    preset = get_preset("seed-moe")
    doc = profile_preset(preset, (1, 32, 256), steps=64, seed=2)
    cells = {(m.batch_size, m.k): m.itl_ms for m in doc.spec.measurements}
    al = acceptance_lengths(doc.spec.acceptance.per_position, preset.max_k)
    best = {bs: _best_k(al, cells, bs, preset.max_k) for bs in (1, 32, 256)}
    assert best[1] < best[32] > best[256]
    assert best == {bs: modelled_best_k(preset, (1, 32, 256))[bs] for bs in best}


def test_profile_cell_measures_only_pure_decode_steps() -> None:
    cell = profile_cell(get_preset("llama8b-eagle3-h200"), 256, 2, steps=20)
    tr = cell.result.trace
    assert tr is not None
    assert tr.prefill_tokens[0] > 0  # the run did start by prefilling
    assert cell.samples == 20
    assert cell.acceptance_length == pytest.approx(1 + 0.84 + 0.84 * 0.76, abs=0.1)
