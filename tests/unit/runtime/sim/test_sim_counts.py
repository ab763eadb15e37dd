"""The engine's vectorised draft counts against the reference (goodput.reached_counts)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specdeploy.runtime.goodput import reached_counts
from specdeploy.runtime.sim.counts import per_sequence_k_counts, uniform_k_counts


@st.composite
def _batch(draw: st.DrawFn, uniform: bool) -> tuple[list[int], list[int], list[int]]:
    """Per sequence: scheduled K, proposal length L <= K, accepted <= L."""
    n = draw(st.integers(0, 12))
    k0 = draw(st.integers(0, 6))
    ks = [k0 if uniform else draw(st.integers(0, 6)) for _ in range(n)]
    lengths = [draw(st.integers(0, k)) for k in ks]
    accepted = [draw(st.integers(0, length)) for length in lengths]
    return ks, lengths, accepted


@settings(max_examples=300, deadline=None)
@given(_batch(uniform=True), st.booleans())
def test_uniform_k_counts_are_the_reference_counts(
    batch: tuple[list[int], list[int], list[int]], full: bool
) -> None:
    ks, lengths, accepted = batch
    k = ks[0] if ks else 3
    if full:  # every draft proposed: the EAGLE case, lengths not given
        lengths = [k] * len(ks)
        accepted = [min(a, k) for a in accepted]
    got = uniform_k_counts(
        k,
        None if full else np.asarray(lengths, dtype=np.int64),
        np.asarray(accepted, dtype=np.int64),
    )
    want = reached_counts(list(zip([k] * len(ks), lengths, accepted, strict=True)), k)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(_batch(uniform=False))
def test_per_sequence_k_counts_are_the_reference_counts(
    batch: tuple[list[int], list[int], list[int]],
) -> None:
    ks, lengths, accepted = batch
    positions = max(ks, default=0)
    got = per_sequence_k_counts(
        np.asarray(ks, dtype=np.int64),
        np.asarray(lengths, dtype=np.int64),
        np.asarray(accepted, dtype=np.int64),
    )
    want = reached_counts(list(zip(ks, lengths, accepted, strict=True)), positions)
    assert got == want


def test_a_missing_draft_is_reached_and_rejected() -> None:
    # Three sequences at K=2: one proposed nothing, one proposed 1 (accepted), one proposed 2.
    got = uniform_k_counts(2, np.array([0, 1, 2]), np.array([0, 1, 2]))
    assert got.reached == [3, 2]  # position 2 reached by the two that accepted position 1
    assert got.proposed == [2, 1]  # the empty proposal counts as reached, not proposed
    assert got.accepted == [2, 1]
    assert got.offered == [2, 1] and got.scheduled == [3, 3]
