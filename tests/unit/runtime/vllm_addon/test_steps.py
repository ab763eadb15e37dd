"""Reading a vLLM step without vLLM: which requests decoded, and the counts of the one definition.

The objects are stand-ins with the attributes vLLM 0.32's ``SchedulerOutput``
and ``ModelRunnerOutput`` have (tests/vllm checks the real ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from specdeploy.runtime.goodput import reached_counts
from specdeploy.runtime.vllm_addon.steps import (
    NO_DECODE,
    count_drafts,
    is_pure_decode,
    read_step,
)

triples = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 7)), max_size=60)


@given(triples, st.integers(0, 6))
def test_the_fast_counter_is_the_reference_definition(
    requests: list[tuple[int, int, int]], positions: int
) -> None:
    assert count_drafts(requests, positions) == reached_counts(requests, positions)


def test_a_request_that_proposed_nothing_reaches_position_one_and_is_rejected() -> None:
    counts = count_drafts([(3, 0, 0), (3, 3, 3), (3, 3, 1)], 3)
    assert counts.reached == [3, 2, 1]
    assert counts.proposed == [2, 2, 1]
    assert counts.accepted == [2, 1, 1]
    assert counts.offered == [2, 2, 2]
    assert counts.scheduled == [3, 3, 3]


@dataclass
class Req:
    """One scheduled request as the stand-in step shows it."""

    id: str
    scheduled: int
    draft: list[int] | None = None
    computed: int = 100
    outputs: int = 5
    sampled: int = 1
    resumed: bool = False
    new: bool = False
    invalid: int = 0


@dataclass
class Step:
    reqs: list[Req]
    extra: dict[str, Any] = field(default_factory=dict)

    def objects(self) -> tuple[Any, Any]:
        cached = [r for r in self.reqs if not r.new]
        so = SimpleNamespace(
            scheduled_new_reqs=[SimpleNamespace(req_id=r.id) for r in self.reqs if r.new],
            scheduled_cached_reqs=SimpleNamespace(
                req_ids=[r.id for r in cached],
                resumed_req_ids={r.id for r in cached if r.resumed},
                num_computed_tokens=[r.computed for r in cached],
                num_output_tokens=[r.outputs for r in cached],
            ),
            num_scheduled_tokens={r.id: r.scheduled for r in self.reqs},
            total_num_scheduled_tokens=sum(r.scheduled for r in self.reqs),
            scheduled_spec_decode_tokens={r.id: r.draft for r in self.reqs if r.draft is not None},
            num_invalid_spec_tokens={r.id: r.invalid for r in self.reqs if r.invalid} or None,
        )
        mro = SimpleNamespace(
            req_id_to_index={r.id: i for i, r in enumerate(self.reqs)},
            sampled_token_ids=[[7] * r.sampled for r in self.reqs],
        )
        return so, mro


def test_every_decoding_request_is_read_including_those_without_a_draft() -> None:
    step = Step(
        [
            Req("a", 4, [1, 2, 3], sampled=3, computed=50),  # 3 proposed, 2 accepted
            Req("b", 1, None, computed=70),  # nothing proposed: absent from the drafts
            Req("c", 1, [], computed=30),  # nothing proposed: present, empty
            Req("d", 64, None, outputs=0, computed=0),  # a prefill chunk
            Req("e", 9, None, new=True),  # a new request
            Req("f", 40, None, resumed=True),  # recomputing after preemption
        ]
    )
    reading = read_step(*step.objects(), k=3)
    assert reading.k == 3
    assert reading.requests == ((3, 3, 2), (3, 0, 0), (3, 0, 0))
    assert reading.verified_tokens == 4 + 1 + 1
    assert reading.context_tokens == 50 + 70 + 30


def test_invalid_drafts_are_not_proposals_but_still_verified() -> None:
    step = Step([Req("a", 4, [1, 2, -1], sampled=4, invalid=1)])
    reading = read_step(*step.objects(), k=3)
    assert reading.requests == ((3, 2, 2),)
    assert reading.verified_tokens == 4


def test_a_proposal_longer_than_the_k_given_raises_k() -> None:
    """Drafts from a step before the previous one (the request was skipped): L <= K holds."""
    step = Step([Req("a", 3, [1, 2], sampled=1), Req("b", 1, None)])
    assert read_step(*step.objects(), k=1) == read_step(*step.objects(), k=2)
    assert read_step(*step.objects(), k=1).requests == ((2, 2, 0), (2, 0, 0))


def test_accepted_is_capped_by_the_proposal_and_requests_without_output_are_skipped() -> None:
    step = Step([Req("a", 2, [5], sampled=4), Req("b", 1, None, sampled=0)])
    assert read_step(*step.objects(), k=1).requests == ((1, 1, 1),)
    assert read_step(*Step([Req("b", 1, None, sampled=0)]).objects(), k=1) == NO_DECODE


def test_a_step_with_only_prefills_reads_as_no_decode() -> None:
    step = Step([Req("e", 9, None, new=True), Req("d", 64, None, outputs=0)])
    assert read_step(*step.objects(), k=2) == NO_DECODE
    assert not is_pure_decode(step.objects()[0])


def test_pure_decode_means_one_token_plus_drafts_for_everyone() -> None:
    assert is_pure_decode(Step([Req("a", 3, [1, 2]), Req("b", 1, None)]).objects()[0])
    assert not is_pure_decode(Step([Req("a", 3, [1, 2]), Req("d", 8, None)]).objects()[0])
