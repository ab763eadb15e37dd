"""Proposal lengths: lookup drafters propose less than K, model drafters always K."""

from __future__ import annotations

import numpy as np
import pytest

from specdeploy.runtime.sim.proposals import (
    ALWAYS_FULL,
    CHAT_LOOKUP,
    LookupProposals,
    effective_rates,
)


def test_lookup_lengths_follow_their_survival_and_nest_across_k() -> None:
    model = LookupProposals(rate=0.3, continuation=0.8)
    rng = np.random.default_rng(1)
    exists, length = rng.random(200_000), rng.random(200_000)
    full = model.lengths(exists, length, 6)
    for k in range(7):
        got = model.lengths(exists, length, k)
        assert np.array_equal(got, np.minimum(full, k))  # common random numbers across K
        assert got.max(initial=0) <= k
    survival = [float(np.mean(full >= i)) for i in range(1, 7)]
    assert survival == pytest.approx(model.survival(6), abs=0.005)
    assert float(np.mean(full == 0)) == pytest.approx(0.7, abs=0.005)


def test_drafting_rate_is_the_rate_then_the_continuation() -> None:
    assert CHAT_LOOKUP.drafting_rate(3) == (0.3, 0.9, 0.9)
    assert ALWAYS_FULL.drafting_rate(3) == (1.0, 1.0, 1.0)
    assert ALWAYS_FULL.always_full and not CHAT_LOOKUP.always_full
    assert effective_rates((0.8, 0.5, 0.5), CHAT_LOOKUP) == pytest.approx((0.24, 0.45, 0.45))
    assert effective_rates((0.8, 0.5), ALWAYS_FULL) == (0.8, 0.5)
    with pytest.raises(ValueError):
        LookupProposals(rate=1.5)
