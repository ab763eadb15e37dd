"""The one acceptance definition: reached positions, a missing draft counted as a rejection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdeploy.runtime.goodput import (
    acceptance_lengths,
    conditional_counts,
    reached_counts,
    verified_per_sequence,
)

K = 4
requests_at_k = st.lists(
    st.tuples(st.integers(0, K), st.integers(0, K)).map(lambda la: (K, la[0], min(la[1], la[0]))),
    min_size=1,
    max_size=60,
)


def brute_force(requests: list[tuple[int, int, int]], positions: int) -> list[list[int]]:
    """reached/proposed/accepted/offered/scheduled by asking each question of each request."""
    out = [[0] * positions for _ in range(5)]
    for k, length, accepted in requests:
        for i in range(1, positions + 1):
            if i > k:
                continue
            first_accepted = all(j <= accepted for j in range(1, i))
            out[0][i - 1] += first_accepted
            out[1][i - 1] += first_accepted and length >= i
            out[2][i - 1] += accepted >= i
            out[3][i - 1] += length >= i
            out[4][i - 1] += 1
    return out


@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6), st.integers(0, 6)), max_size=50).map(
        lambda rs: [(k, min(n, k), min(a, n, k)) for k, n, a in rs]
    )
)
def test_reached_counts_equal_a_brute_force_count(requests: list[tuple[int, int, int]]) -> None:
    assert list(reached_counts(requests, 5)) == brute_force(requests, 5)


@given(requests_at_k)
def test_acceptance_length_from_the_counts_is_the_realized_tokens_per_step(
    requests: list[tuple[int, int, int]],
) -> None:
    """With a missing draft counted as rejected, AL(K) telescopes to the mean tokens per step."""
    counts = reached_counts(requests, K)
    rates = [a / r if r else 0.0 for a, r in zip(counts.accepted, counts.reached, strict=True)]
    tokens = sum(1 + accepted for _, _, accepted in requests) / len(requests)
    assert acceptance_lengths(rates, K)[K] == pytest.approx(tokens)


def test_a_request_with_no_draft_reaches_position_one_and_is_rejected_there() -> None:
    counts = reached_counts([(3, 0, 0), (3, 3, 3)], 3)
    assert counts.reached == [2, 1, 1]
    assert counts.proposed == [1, 1, 1]
    assert counts.accepted == [1, 1, 1]
    # Per proposal the first position looks perfect; per reached position it is 1/2.
    assert counts.accepted[0] / counts.proposed[0] == 1.0
    assert counts.accepted[0] / counts.reached[0] == 0.5


def test_full_proposals_give_the_classic_conditional_counts() -> None:
    assert conditional_counts([0, 1, 3], 3) == ([3, 2, 1], [2, 1, 1])


def test_verified_tokens_follow_the_proposal_survival() -> None:
    assert verified_per_sequence([0.25, 0.25, 0.25], 3) == pytest.approx(1.75)
    assert verified_per_sequence([], 2) == 3.0  # no knowledge: always proposed
