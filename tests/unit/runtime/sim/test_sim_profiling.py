"""The modelled profile of a preset: cells on a context axis, counts, baseline, and validation."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from specdeploy.runtime.goodput import FloatArray, acceptance_lengths
from specdeploy.runtime.profile import (
    Measurement,
    Source,
    SpeculationProfile,
    dump_profile,
    parse_profile,
)
from specdeploy.runtime.schedule import cost_model, derive_schedule, vanilla_gain
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.profiling import (
    context_prompts,
    modelled_best_k,
    profile_cell,
    profile_preset,
)

BATCHES = (1, 8, 64, 256)


def _best_k(al: FloatArray, itl_ms: dict[tuple[int, int], float], bs: int, max_k: int) -> int:
    goodput = [float(al[k]) / itl_ms[(bs, k)] for k in range(max_k + 1)]
    return goodput.index(max(goodput))


def _medium(doc: SpeculationProfile) -> dict[tuple[int, int], Measurement]:
    """Per (batch size, K), the cell of the middle context."""
    cells: dict[tuple[int, int], list[Measurement]] = {}
    for m in doc.spec.measurements:
        cells.setdefault((m.batch_size, m.k), []).append(m)
    return {key: rows[len(rows) // 2] for key, rows in cells.items()}


@pytest.fixture(scope="module")
def dense_profile() -> SpeculationProfile:
    return profile_preset(get_preset("seed-dense"), BATCHES, steps=48, seed=1)


@pytest.fixture(scope="module")
def ngram_profile() -> SpeculationProfile:
    return profile_preset(get_preset("llama8b-ngram-a100"), (1, 16), steps=200, seed=2)


def test_profile_validates_and_round_trips(dense_profile: SpeculationProfile) -> None:
    doc = dense_profile
    again = parse_profile(doc.to_document())
    assert again == doc
    assert parse_profile(yaml.safe_load(dump_profile(doc))) == doc
    assert doc.spec.source is Source.MODELLED
    assert doc.metadata.name == f"p-{doc.spec.fingerprint.digest()}"


def test_every_batch_size_and_k_is_measured_at_three_contexts_sorted(
    dense_profile: SpeculationProfile,
) -> None:
    preset = get_preset("seed-dense")
    rows = [(m.batch_size, m.k, m.context_tokens or 0.0) for m in dense_profile.spec.measurements]
    assert rows == sorted(rows)
    assert [(bs, k) for bs, k, _ in rows] == [
        (bs, k) for bs in BATCHES for k in range(6) for _ in range(3)
    ]
    prompts = context_prompts(preset)
    assert len(prompts) == 3 and prompts[-1] >= 6 * prompts[0]
    assert sum(prompts) / 3 == pytest.approx(preset.mean_context, rel=0.01)
    for m in dense_profile.spec.measurements:
        assert m.samples == 48
        assert (m.acceptance_length is None) == (m.k == 0)
        # EAGLE proposes every draft: a sequence verifies K + 1 tokens, every step drafts.
        assert m.verified_tokens == pytest.approx(m.k + 1)
        assert (m.drafting_rate is None) == (m.k == 0)
        assert m.drafting_rate is None or m.drafting_rate == 1.0


def test_longer_contexts_cost_more_and_the_cost_model_sees_it(
    dense_profile: SpeculationProfile,
) -> None:
    by_cell: dict[tuple[int, int], list[Measurement]] = {}
    for m in dense_profile.spec.measurements:
        by_cell.setdefault((m.batch_size, m.k), []).append(m)
    for rows in by_cell.values():
        itl = [m.itl_ms for m in rows]
        assert itl == sorted(itl) and itl[-1] > itl[0]
    assert cost_model(dense_profile.spec).gamma > 0.0


def test_cell_itl_is_the_cost_model_with_a_table_set(dense_profile: SpeculationProfile) -> None:
    preset = get_preset("seed-dense")
    for (bs, k), m in _medium(dense_profile).items():
        assert m.context_tokens is not None
        # The context grows while measuring: ITL within the band of the contexts it spanned.
        spread = 48 * (k + 1) / 2.0
        band = [
            # the profiler's engine loads the add-on's plugin (SPECDEPLOY_PLAIN_K0=on)
            preset.cost.decode_itl(
                bs, k, context=m.context_tokens + d, piecewise=True, plain_k0=True
            )
            * 1e3
            for d in (-spread, spread)
        ]
        assert band[0] * 0.999 <= m.itl_ms <= band[1] * 1.001


def test_baseline_is_plain_decoding_once_per_batch_size(dense_profile: SpeculationProfile) -> None:
    spec = dense_profile.spec
    assert [b.batch_size for b in spec.baseline] == list(BATCHES)
    reference = cost_model(spec).reference_context
    k0 = cost_model(spec)
    for b in spec.baseline:
        assert b.context_tokens == pytest.approx(reference, rel=0.05)
        # No drafter pass, no speculation bookkeeping, no piecewise graphs: faster than K=0.
        assert b.itl_ms < k0.itl_ms(b.batch_size, 0, b.batch_size, b.batch_size * reference)
    gain = vanilla_gain(spec)
    assert gain is not None and gain[1] > 1.5


def test_acceptance_counts_are_kept_and_give_the_rates(dense_profile: SpeculationProfile) -> None:
    preset = get_preset("seed-dense")
    acc = dense_profile.spec.acceptance
    assert acc.reached and acc.proposed and acc.accepted
    assert acc.proposed == acc.reached  # EAGLE always proposes
    assert acc.drafting_rate == (1.0,) * preset.max_k
    assert acc.proposal_survival == (1.0,) * preset.max_k
    rates = [a / r for a, r in zip(acc.accepted, acc.reached, strict=True)]
    assert list(acc.per_position) == pytest.approx(rates, abs=1e-4)
    assert list(acc.per_position) == pytest.approx(preset.nominal_rates()[:5], abs=0.03)
    assert acc.samples == acc.reached[0] > 1000


def test_ngram_cells_verify_what_was_proposed(ngram_profile: SpeculationProfile) -> None:
    preset = get_preset("llama8b-ngram-a100")
    survival = preset.proposal_model.survival(preset.max_k)
    for m in ngram_profile.spec.measurements:
        if m.k:
            assert m.verified_tokens is not None and m.verified_tokens < m.k + 1
        if m.batch_size == 16:  # 3,200 sequence-steps a cell
            assert m.verified_tokens == pytest.approx(1.0 + sum(survival[: m.k]), rel=0.05)
            assert m.k == 0 or m.drafting_rate == pytest.approx(survival[0], abs=0.03)
    acc = ngram_profile.spec.acceptance
    assert acc.reached and acc.proposed and acc.drafting_rate and acc.proposal_survival
    assert acc.proposed[0] < 0.5 * acc.reached[0]
    assert acc.drafting_rate[0] == pytest.approx(0.3, abs=0.03)
    # A missing draft is a rejection: a_1 is well below the rate given a proposal.
    assert acc.per_position[0] == pytest.approx(preset.nominal_rates()[0], abs=0.03)
    assert acc.per_position[0] < 0.5 * preset.acceptance.nominal()[0]


def test_profile_with_a_context_axis_still_derives_a_schedule(
    dense_profile: SpeculationProfile,
) -> None:
    schedule = derive_schedule(dense_profile.spec, 256)
    assert schedule[0][0] == 1 and schedule[-1][1] == 256
    ks = [k for _, _, k in schedule]
    assert ks == sorted(ks, reverse=True) and ks[0] >= 3 and ks[-1] <= 1


def test_profile_subset_of_k_always_includes_zero() -> None:
    doc = profile_preset(get_preset("llama8b-ngram-a100"), (4, 2), ks=(2,), steps=16)
    assert sorted({(m.batch_size, m.k) for m in doc.spec.measurements}) == [
        (2, 0), (2, 2), (4, 0), (4, 2),
    ]  # fmt: skip
    assert len(doc.spec.acceptance.per_position) == 2


def test_profile_rejects_k_beyond_max_k_bad_batch_sizes_and_contexts() -> None:
    preset = get_preset("seed-moe")
    with pytest.raises(ValueError, match="maxK"):
        profile_preset(preset, (1,), ks=(9,))
    with pytest.raises(ValueError, match="batch sizes"):
        profile_preset(preset, (0, 4))
    with pytest.raises(ValueError, match="contexts"):
        profile_preset(preset, (1,), contexts=())


def test_moe_profile_shows_the_non_monotonic_best_k() -> None:
    preset = get_preset("seed-moe")
    doc = profile_preset(preset, (1, 32, 256), steps=64, seed=2, contexts=(1.0,))
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
    assert np.all(tr.verified[tr.prefill_tokens == 0] == 3 * tr.decode_seqs[tr.prefill_tokens == 0])


def test_plain_decoding_cells_refuse_drafts() -> None:
    with pytest.raises(ValueError, match="k must be 0"):
        profile_cell(get_preset("seed-dense"), 4, 2, speculative=False)


def test_sim_profiler_backend_returns_the_counts_and_totals_of_its_measured_steps() -> None:
    from specdeploy.runtime.profiler.sim_backend import SimBackend

    preset = get_preset("llama8b-ngram-a100")
    backend = SimBackend(preset, seed=4, jitter=0.0)
    sample = backend.measure(16, 3, 64)
    assert len(sample.step_seconds) == 64
    assert sample.sequence_steps == 16 * 64
    assert sample.proposed is not None and sample.offered is not None
    assert sample.scheduled == (16 * 64,) * 3
    # n-gram: a third of the sequence-steps propose; a missing draft is reached, not proposed.
    assert sample.drafted[0] == 16 * 64
    assert sample.proposed[0] < 0.5 * sample.drafted[0]
    assert all(
        a <= p <= d
        for a, p, d in zip(sample.accepted, sample.proposed, sample.drafted, strict=True)
    )
    assert sample.verified_tokens is not None and sample.context_tokens is not None
    assert 16 * 64 < sample.verified_tokens < 4 * 16 * 64
    long = backend.measure(16, 3, 64, prompt_tokens=2000)
    assert long.context_tokens is not None
    assert long.context_tokens > 4 * sample.context_tokens  # the search can walk a context axis
    assert sum(long.step_seconds) > sum(sample.step_seconds)


def test_sim_profiler_backend_measures_plain_decoding_for_the_floor() -> None:
    """So a profiling Job on the local cluster's (emulated) GPUs yields a baseline."""
    from specdeploy.runtime.profiler.backend import MeasuresBaseline
    from specdeploy.runtime.profiler.sim_backend import SimBackend

    backend = SimBackend(get_preset("seed-dense"), seed=4, jitter=0.0)
    assert isinstance(backend, MeasuresBaseline)
    plain = backend.measure_baseline(8, 32)
    speculating = backend.measure(8, 0, 32)
    assert plain.k == 0 and plain.drafted == () and len(plain.step_seconds) == 32
    assert plain.verified_tokens == plain.sequence_steps == 8 * 32  # one token each
    # no drafter pass, no speculation bookkeeping: faster than K=0 with speculation configured
    assert sum(plain.step_seconds) < sum(speculating.step_seconds)
    with pytest.raises(Exception, match="exceeds"):
        backend.measure_baseline(10_000, 4)
