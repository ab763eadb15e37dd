"""What the profile records: counts with missing drafts as rejections, cost-model fields, baseline.

A stand-in backend drafts like n-gram: a quarter of the sequences propose all
K drafts (and accept the first two of them), the rest propose nothing. Its
counts come from the reference definition (``goodput.reached_counts``), so
the expected profile follows by hand.
"""

from __future__ import annotations

import pytest

from specdeploy.runtime.goodput import reached_counts
from specdeploy.runtime.profile import Baseline, Fingerprint, Source
from specdeploy.runtime.profiler.backend import CellSample, MeasuresBaseline
from specdeploy.runtime.profiler.exit_codes import out_of_memory
from specdeploy.runtime.profiler.run import Outcome, ProfileOptions, profile, raw_document
from specdeploy.runtime.profiler.sampling import Sampling
from specdeploy.runtime.profiler.search import SearchMode

CONTEXT = 500
"""Context tokens of every sequence."""


def itl_s(batch_size: int, k: int) -> float:
    return 0.01 * batch_size + 0.002 * batch_size * k


class NgramLike:
    """Every fourth sequence proposes K drafts and accepts min(K, 2); the others nothing."""

    name = "ngram-like"
    source = Source.MEASURED

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(model="m", method="ngram", gpu_type="g", max_k=3)

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        per_step = [(k, k, min(k, 2)) if i % 4 == 0 else (k, 0, 0) for i in range(batch_size)]
        counts = reached_counts(per_step * steps, k)
        proposals = sum(length for _, length, _ in per_step)
        return CellSample(
            batch_size,
            k,
            [itl_s(batch_size, k)] * steps,
            counts.reached,
            counts.accepted,
            proposed=counts.proposed,
            offered=counts.offered,
            scheduled=counts.scheduled,
            sequence_steps=batch_size * steps,
            verified_tokens=(batch_size + proposals) * steps,
            context_tokens=CONTEXT * batch_size * steps,
        )

    def close(self) -> None:
        return None


class WithBaseline(NgramLike):
    def __init__(self) -> None:
        self.baseline_calls: list[int] = []

    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        self.baseline_calls.append(batch_size)
        return CellSample(
            batch_size,
            0,
            [0.9 * itl_s(batch_size, 0)] * steps,
            sequence_steps=batch_size * steps,
            verified_tokens=batch_size * steps,
            context_tokens=CONTEXT * batch_size * steps,
        )


OPTIONS = ProfileOptions(
    backend="test",
    batch_sizes=(4, 8),
    search=SearchMode.EXHAUSTIVE,
    sampling=Sampling(steps=4, min_repeats=1, max_repeats=1),
)


def test_acceptance_counts_a_missing_draft_as_a_rejection() -> None:
    spec = profile(OPTIONS, NgramLike()).profile.spec
    acc = spec.acceptance
    # 4 of every 16 sequence-steps reach position 2: those that proposed and accepted.
    assert acc.per_position == (0.25, 1.0, 0.0)
    assert acc.drafting_rate == (0.25, 1.0, 1.0)
    assert acc.proposal_survival == (0.25, 0.25, 0.25)
    assert acc.reached is not None and acc.proposed is not None and acc.accepted is not None
    assert acc.reached[0] == acc.samples and acc.proposed[0] == acc.reached[0] // 4
    assert all(a <= p <= r for a, p, r in zip(acc.accepted, acc.proposed, acc.reached, strict=True))


def test_each_cell_records_tokens_per_sequence_step_verified_tokens_context_and_rate() -> None:
    spec = profile(OPTIONS, NgramLike()).profile.spec
    rows = {(m.batch_size, m.k): m for m in spec.measurements}
    for (_, k), row in rows.items():
        assert row.verified_tokens == pytest.approx(1 + 0.25 * k)
        assert row.context_tokens == CONTEXT
        if k == 0:
            assert row.acceptance_length is None and row.drafting_rate is None
        else:
            assert row.acceptance_length == pytest.approx(1 + 0.25 * min(k, 2))
            assert row.drafting_rate == 0.25


def test_a_backend_that_measures_plain_decoding_gives_a_baseline_per_batch_size() -> None:
    backend = WithBaseline()
    assert isinstance(backend, MeasuresBaseline)
    outcome = profile(OPTIONS, backend)
    assert backend.baseline_calls == [4, 8]
    assert outcome.profile.spec.baseline == (
        Baseline(
            batch_size=4, itl_ms=36.0, samples=4, context_tokens=CONTEXT, itl_half_width_ms=0.0
        ),
        Baseline(
            batch_size=8, itl_ms=72.0, samples=4, context_tokens=CONTEXT, itl_half_width_ms=0.0
        ),
    )
    raw = raw_document(OPTIONS, outcome)
    assert [c["batchSize"] for c in raw["baseline"]] == [4, 8]


def test_without_the_method_or_when_not_asked_there_is_no_baseline() -> None:
    assert not isinstance(NgramLike(), MeasuresBaseline)
    assert profile(OPTIONS, NgramLike()).profile.spec.baseline == ()
    backend = WithBaseline()
    off = ProfileOptions(**{**vars(OPTIONS), "baseline": False})
    assert profile(off, backend).profile.spec.baseline == ()
    assert backend.baseline_calls == []


def test_the_raw_file_records_counts_drafting_rate_and_verified_tokens() -> None:
    outcome: Outcome = profile(OPTIONS, NgramLike())
    raw = raw_document(OPTIONS, outcome)
    assert raw["counts"] == "reached"
    assert raw["fingerprint"]["method"] == "ngram"
    cell = next(c for c in raw["cells"] if (c["batchSize"], c["k"]) == (8, 3))
    assert cell["draftingRate"] == 0.25
    assert cell["verifiedTokens"] == (8 + 2 * 3) * 4
    assert cell["verifiedPerSequence"] == pytest.approx(1.75)
    assert cell["reached"][0] == cell["sequenceSteps"] == 32
    assert (cell["proposed"], cell["accepted"]) == ([8, 8, 8], [8, 8, 0])


class BaselineOomAbove4(WithBaseline):
    def measure_baseline(self, batch_size: int, steps: int) -> CellSample:
        if batch_size > 4:
            raise out_of_memory(f"plain batch {batch_size} does not fit")
        return super().measure_baseline(batch_size, steps)


def test_a_baseline_that_does_not_fit_stops_the_baseline_there_and_says_so() -> None:
    backend = BaselineOomAbove4()
    outcome = profile(OPTIONS, backend)
    assert [b.batch_size for b in outcome.profile.spec.baseline] == [4]
    assert {m.batch_size for m in outcome.profile.spec.measurements} == {4, 8}
    assert any("baseline at batch size 8 does not fit" in line for line in outcome.grid.log)


def test_a_baseline_repeats_until_its_interval_is_narrow_like_any_cell() -> None:
    noisy = WithBaseline()
    options = ProfileOptions(
        **{**vars(OPTIONS), "sampling": Sampling(steps=4, min_repeats=2, max_repeats=3)}
    )
    profile(options, noisy)
    # Noise-free step times: stable after the minimum of two repeats per batch size.
    assert noisy.baseline_calls == [4, 4, 8, 8]
