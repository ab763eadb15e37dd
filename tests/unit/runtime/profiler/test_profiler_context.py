"""The profile's context axis: a few cells at other contexts, so the cost model prices KV reads.

A stand-in backend with a known context cost (``GAMMA`` ms per context token
of the batch) and an acceptance that differs at other contexts (long
prompts give an n-gram lookup more to match), so a test can tell whether
the context cells priced context and stayed out of the acceptance.
"""

from __future__ import annotations

import json

import pytest

from specdeploy.runtime.goodput import reached_counts
from specdeploy.runtime.profile import Fingerprint, Source
from specdeploy.runtime.profiler.backend import CellSample, MeasuresContext
from specdeploy.runtime.profiler.exit_codes import out_of_memory
from specdeploy.runtime.profiler.from_raw import rederive
from specdeploy.runtime.profiler.run import ProfileOptions, profile, raw_document
from specdeploy.runtime.profiler.sampling import Sampling
from specdeploy.runtime.profiler.search import SearchMode
from specdeploy.runtime.schedule import cost_model

PROMPT = 400
GAMMA = 2e-5
"""ms per context token in the batch."""
SIZES = (1, 4, 16)


def itl_ms(batch_size: int, k: int, context: int) -> float:
    return 5.0 + 0.3 * batch_size + 0.05 * batch_size * (1 + k) + GAMMA * batch_size * context


class Backend:
    """Every sequence proposes K and accepts the first (all K at a long context)."""

    name = "context-test"
    source = Source.MEASURED

    def __init__(self, *, oom_above: int | None = None) -> None:
        self.oom_above = oom_above
        self.asked: list[tuple[int, int, int]] = []

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(model="m", method="ngram", gpu_type="g", max_k=2)

    def default_prompt_tokens(self) -> int:
        return PROMPT

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        return self._cell(batch_size, k, steps, PROMPT)

    def measure_at_context(
        self, batch_size: int, k: int, steps: int, prompt_tokens: int
    ) -> CellSample:
        self.asked.append((batch_size, k, prompt_tokens))
        if self.oom_above is not None and prompt_tokens > self.oom_above:
            raise out_of_memory(f"{prompt_tokens} tokens of context do not fit")
        return self._cell(batch_size, k, steps, prompt_tokens)

    def _cell(self, batch_size: int, k: int, steps: int, context: int) -> CellSample:
        accepted = k if context > PROMPT else min(k, 1)
        counts = reached_counts([(k, k, accepted)] * batch_size * steps, k)
        return CellSample(
            batch_size,
            k,
            [itl_ms(batch_size, k, context) / 1000.0] * steps,
            counts.reached,
            counts.accepted,
            proposed=counts.proposed,
            offered=counts.offered,
            scheduled=counts.scheduled,
            sequence_steps=batch_size * steps,
            verified_tokens=batch_size * (1 + k) * steps,
            context_tokens=context * batch_size * steps,
        )

    def close(self) -> None:
        return None


OPTIONS = ProfileOptions(
    backend="test",
    batch_sizes=SIZES,
    search=SearchMode.EXHAUSTIVE,
    sampling=Sampling(steps=4, min_repeats=1, max_repeats=1),
    baseline=False,
)


def test_the_context_axis_prices_context_and_leaves_acceptance_to_the_serving_mix() -> None:
    backend = Backend()
    assert isinstance(backend, MeasuresContext)
    outcome = profile(OPTIONS, backend)
    spec = outcome.profile.spec
    best = {bs: max(outcome.grid.measured_ks(bs), key=lambda k: outcome.grid.goodput(bs, k))
            for bs in SIZES}  # fmt: skip
    assert sorted(backend.asked) == sorted(
        (bs, best[bs], p) for bs in SIZES for p in (PROMPT // 4, PROMPT * 4)
    )
    contexts: dict[tuple[int, int], set[float | None]] = {
        (m.batch_size, m.k): set() for m in spec.measurements
    }
    for m in spec.measurements:
        contexts[(m.batch_size, m.k)].add(m.context_tokens)
    for bs in SIZES:
        assert contexts[(bs, best[bs])] == {PROMPT / 4, PROMPT, PROMPT * 4}
    # the long-context cells accepted every draft; the pooled acceptance ignores them
    assert spec.acceptance.per_position == (1.0, 0.0)
    model = cost_model(spec)
    assert model.gamma == pytest.approx(GAMMA, rel=1e-3)
    for bs in SIZES:
        predicted = model.itl_ms(bs, 1, bs * 2.0, bs * 3000.0)
        assert predicted == pytest.approx(itl_ms(bs, 1, 3000), rel=1e-3)


def test_without_the_axis_the_profile_has_one_context_and_no_context_cost() -> None:
    off = ProfileOptions(**{**vars(OPTIONS), "context_axis": False})
    spec = profile(off, Backend()).profile.spec
    assert {m.context_tokens for m in spec.measurements} == {PROMPT}
    assert cost_model(spec).gamma == 0.0


def test_a_context_that_does_not_fit_is_skipped_and_noted() -> None:
    outcome = profile(OPTIONS, Backend(oom_above=PROMPT))
    assert {p for _, _, p in outcome.grid.contexts} == {PROMPT // 4}
    assert any("does not fit" in line for line in outcome.grid.log)


def test_the_raw_file_keeps_the_context_cells_for_rederivation() -> None:
    outcome = profile(OPTIONS, Backend())
    raw = json.loads(json.dumps(raw_document(OPTIONS, outcome)))
    assert sorted(c["promptTokens"] for c in raw["contexts"]) == sorted(
        [PROMPT // 4, PROMPT * 4] * len(SIZES)
    )
    again = rederive(raw, source_name="raw.json")
    assert again.spec.measurements == outcome.profile.spec.measurements
    assert cost_model(again.spec).gamma == pytest.approx(GAMMA, rel=1e-3)
