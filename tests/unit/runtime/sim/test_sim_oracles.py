"""The oracles: the per-step true-cost oracle matches the best fixed K where K should not move."""

from __future__ import annotations

import pytest

from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.sim.acceptance import Mixture, Profile
from specdeploy.runtime.sim.oracles import FixedClassK, StateOracle, class_ranking
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.state import StepState
from specdeploy.runtime.sim.workload import ClosedLoop

DENSE = get_preset("seed-dense")


@pytest.mark.parametrize("bs", [8, 128])
def test_state_oracle_is_the_best_fixed_k_in_a_steady_closed_loop(bs: int) -> None:
    kw = {"steps": 1500, "warmup_steps": 200, "seed": 4, "piecewise": True}
    fixed = {
        k: DENSE.simulate(FixedPolicy(k), ClosedLoop(bs), **kw).tokens_per_s  # type: ignore[arg-type]
        for k in range(DENSE.max_k + 1)
    }
    oracle = StateOracle(DENSE.cost, DENSE.acceptance, DENSE.proposal_model, range(6))
    got = DENSE.simulate(oracle, ClosedLoop(bs), **kw)  # type: ignore[arg-type]
    assert got.tokens_per_s >= 0.998 * max(fixed.values())
    assert got.k_changes_per_1000_steps < 100


def test_state_oracle_ignores_the_prefill_riding_along() -> None:
    # A prefill costs the same whatever K: the choice for the decode part is unchanged.
    oracle = StateOracle(DENSE.cost, DENSE.acceptance, DENSE.proposal_model, range(6))
    decode = StepState(128, 128, 128 * 300, 0, 0, 0, 0.0, 1, 0, 0.0)
    with_prefill = decode._replace(prefill_tokens=4000, prefill_sequences=8, prefill_context=4000)
    assert oracle.choose_k_for(decode) == oracle.choose_k_for(with_prefill)


def test_per_class_k_gives_the_better_class_more_drafts_and_verifies_per_request() -> None:
    good = Profile((0.95, 0.9, 0.85, 0.8, 0.75))
    bad = Profile((0.2, 0.1, 0.1, 0.1, 0.1))
    mix = Mixture((good, bad), (0.5, 0.5))
    ranking = class_ranking(
        DENSE.cost, mix, DENSE.proposal_model, range(6), batch_size=64, context=300.0
    )
    (k_good, k_bad), _ = ranking[0]
    assert k_good > k_bad
    # Simulated: the bad class verifies fewer tokens than the step's K.
    mixed = DENSE.simulate(
        FixedClassK((k_good, k_bad)), ClosedLoop(64), acceptance=mix, steps=300, seed=5
    )
    assert mixed.mean_k == pytest.approx(k_good, abs=0.05)  # 0 on prefill-only steps
    assert mixed.verified_tokens < mixed.decode_seq_steps * (k_good + 1)
    assert mixed.verified_tokens > mixed.decode_seq_steps * (k_bad + 1)
