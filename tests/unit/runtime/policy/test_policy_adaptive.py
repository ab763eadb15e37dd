"""AdaptivePolicy's behaviour against a small synthetic engine whose truth is known.

The engine's step costs ITL = a(bs) + b * T + e * (T - bs) + g * C + d * [K > 0]
(ms) with T the tokens verified, e what a draft token costs beyond the others
(a machine that verifies dearer than the profile's), C the context read and d
the drafter's pass (an n-gram lookup runs whether or not it finds a match),
its drafter proposes a draft with
probability ``q`` per sequence-step (n-gram-like; 1.0 is EAGLE-like), and
acceptance is drawn per position from known rates. Because the truth is
known, each test can say which K is right and check that the policy gets
there, and how fast.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from specdeploy.runtime.cost import Cell, StepCostModel
from specdeploy.runtime.goodput import acceptance_lengths, reached_counts
from specdeploy.runtime.policy import AdaptiveConfig, AdaptivePolicy
from specdeploy.runtime.policy.base import StepRecord

MAX_BS, MAX_K = 64, 4
PRIOR = [0.8] * MAX_K
NO_EXPLORATION = AdaptiveConfig(explore_budget=0.0, plain_reference_share=0.0)


@dataclass(frozen=True)
class Truth:
    """The synthetic machine and workload."""

    fixed_ms: float = 5.0
    per_token_ms: float = 0.05
    per_context_ms: float = 0.0
    context: float = 100.0
    rates: tuple[float, ...] = tuple(PRIOR)
    drafting: float = 1.0
    scale: float = 1.0
    drafter_ms: float = 0.0
    draft_token_ms: float = 0.0

    def itl_ms(self, bs: int, k: int, verified: float, context_tokens: float) -> float:
        step = self.fixed_ms + 0.02 * bs + self.per_token_ms * verified
        step += self.draft_token_ms * (verified - bs)
        step += self.drafter_ms if k > 0 else 0.0
        return self.scale * (step + self.per_context_ms * context_tokens)

    def goodput(self, bs: int, k: int) -> float:
        """Tokens/s per sequence at K (proposals are all or nothing)."""
        rates = [self.drafting * self.rates[0], *self.rates[1:]]
        al = float(acceptance_lengths(rates, MAX_K)[k])
        verified = bs * (1 + self.drafting * k)
        return 1000.0 * al / self.itl_ms(bs, k, verified, bs * self.context)

    def best(self, bs: int) -> int:
        return max(range(MAX_K + 1), key=lambda k: self.goodput(bs, k))


def profile_model(truth: Truth, contexts: Sequence[float] = (100.0,)) -> StepCostModel:
    """The cost model a profile of ``truth`` would fit (cells at every bs, K and context)."""
    cells = [
        Cell(
            bs, k, truth.itl_ms(bs, k, bs * (1 + truth.drafting * k), bs * c),
            1 + truth.drafting * k, c,
        )
        for bs in (1, 8, 32, 64)
        for k in range(MAX_K + 1)
        for c in contexts
    ]  # fmt: skip
    vanilla = [(bs, 0.9 * truth.itl_ms(bs, 0, bs, bs * contexts[0])) for bs in (1, 8, 32, 64)]
    return StepCostModel.fit(cells, vanilla)


def policy_for(
    truth: Truth, config: AdaptiveConfig = NO_EXPLORATION, **profile: object
) -> AdaptivePolicy:
    model = profile_model(Truth(**profile) if profile else truth)  # type: ignore[arg-type]
    prior = profile.get("rates", truth.rates)
    return AdaptivePolicy(
        None,
        list(prior),  # type: ignore[call-overload]
        cost=model,
        max_batch_size=MAX_BS,
        allowed_k=list(range(MAX_K + 1)),
        config=config,
    )


class Engine:
    """Runs steps of ``truth`` against a policy, feeding back what the add-on would."""

    def __init__(self, policy: AdaptivePolicy, truth: Truth, seed: int = 0) -> None:
        self.policy = policy
        self.truth = truth
        self.rng = np.random.default_rng(seed)

    def step(self, bs: int) -> int:
        truth = self.truth
        k = self.policy.choose_k(bs)
        requests = []
        for _ in range(bs):
            length = k if self.rng.random() < truth.drafting else 0
            accepted = 0
            while accepted < length and self.rng.random() < truth.rates[accepted]:
                accepted += 1
            requests.append((k, length, accepted))
        counts = reached_counts(requests, k)
        verified = sum(1 + length for _, length, _ in requests)
        context = int(bs * truth.context)
        seconds = truth.itl_ms(bs, k, verified, context) / 1000.0
        self.policy.observe(
            StepRecord(
                bs, k, seconds, counts.reached, counts.proposed, counts.accepted,
                decode_sequences=bs, verified_tokens=verified, context_tokens=context,
                offered=counts.offered, scheduled=counts.scheduled,
            )
        )  # fmt: skip
        return k

    def run(self, steps: int, bs: int) -> list[int]:
        return [self.step(bs) for _ in range(steps)]


def switches(ks: Sequence[int]) -> int:
    return sum(a != b for a, b in itertools.pairwise(ks))


# --- the profile's choice, before anything is observed ------------------------------


def test_with_no_evidence_k_is_the_profiles_best_k_at_each_batch_size() -> None:
    truth = Truth()
    for bs in (1, 8, 32, 64):
        policy = policy_for(truth)
        assert policy.choose_k(bs) == truth.best(bs)
    assert truth.best(1) > truth.best(64)  # the test can fail: K falls with load


# --- acceptance: a missing draft is a rejection ------------------------------------


def test_live_acceptance_counts_sequences_without_a_draft_as_rejections() -> None:
    truth = Truth(drafting=0.3)
    engine = Engine(policy_for(truth), truth, seed=1)
    engine.run(640, 8)
    estimate = engine.policy.estimates()
    assert estimate.acceptance[0] == pytest.approx(0.3 * 0.8, abs=0.05)
    assert estimate.drafting_rate[0] == pytest.approx(0.3, abs=0.05)


def test_rare_proposals_turn_speculation_down_where_conditional_acceptance_would_not() -> None:
    """The shipped n-gram case: acceptance given a proposal is high, but proposals are rare.

    The drafter's pass costs the same whether it finds a match or not, so with
    proposals in a quarter of the sequence-steps K=0 wins; counted per
    proposal, the acceptance would keep K high.
    """
    truth = Truth(drafting=0.25, drafter_ms=3.0)
    profiled = Truth(drafter_ms=3.0)  # the profile's prompts always found a match
    assert profiled.best(8) >= 2 and truth.best(8) == 0  # the test can fail: they differ
    engine = Engine(policy_for(profiled), truth, seed=2)
    assert engine.policy.choose_k(8) == profiled.best(8)
    ks = engine.run(1280, 8)
    assert ks.index(0) <= 200
    assert engine.policy.current_k == 0


# --- step cost ---------------------------------------------------------------------


def test_a_uniformly_slower_machine_is_one_scale_and_keeps_the_ranking() -> None:
    profiled = Truth()
    serving = Truth(scale=2.0)
    engine = Engine(policy_for(profiled), serving, seed=3)
    engine.run(1280, 32)
    estimates = engine.policy.estimates()
    assert estimates.global_cost_scale == pytest.approx(2.0, rel=0.05)
    # Every batch size, observed or not, inherits it; the choice stays the true best.
    for bs in (1, 8, 64):
        chosen = max(engine.policy.explain(bs).values(), key=lambda e: e.goodput).k
        assert chosen == serving.best(bs)


def test_a_longer_context_is_an_additive_cost_the_policy_prices() -> None:
    """KV reads add the same cost to every K: relative to it, drafting gets cheaper."""
    profiled = Truth(per_context_ms=0.002, per_token_ms=0.2)
    model = profile_model(profiled, contexts=(100.0, 400.0))
    assert model.gamma == pytest.approx(0.002, rel=0.01)
    serving = Truth(per_context_ms=0.002, per_token_ms=0.2, context=8000.0)
    assert serving.best(32) != profiled.best(32)  # the test can fail: context matters here
    policy = AdaptivePolicy(
        None, PRIOR, cost=model, max_batch_size=MAX_BS, allowed_k=list(range(MAX_K + 1)),
        config=NO_EXPLORATION,
    )  # fmt: skip
    engine = Engine(policy, serving, seed=4)
    engine.run(640, 32)
    assert policy.context_per_sequence == pytest.approx(8000.0, rel=0.01)
    assert policy.current_k == serving.best(32)


# --- never settle for a loss -----------------------------------------------------------


def test_an_acceptance_collapse_reaches_k0_within_300_steps() -> None:
    truth = Truth()
    engine = Engine(policy_for(truth), truth, seed=5)
    engine.run(2000, 32)
    assert engine.policy.current_k >= 1
    engine.truth = Truth(rates=(0.02,) * MAX_K)
    ks = engine.run(2000, 32)
    first_zero = ks.index(0)
    assert first_zero <= 300
    assert sum(k > 0 for k in ks[first_zero:]) <= 0.01 * len(ks)  # it stays there


def test_moving_toward_k0_needs_no_margin_and_between_k_above_it_does() -> None:
    truth = Truth()
    policy = policy_for(truth)
    bs = 16
    k = policy.choose_k(bs)
    scores = policy._score[bs]
    bars = policy._bar[bs]
    assert bars[k] > scores[k]  # a margin guards K >= 1 against K >= 1
    for other in range(1, MAX_K + 1):
        if other != k:
            assert (scores[other] > bars[k]) == (policy._preferred(bs) == other)
    # Toward K=0: the bar is K=0's own score, nothing more.
    assert policy._preferred(bs) == (0 if scores[0] >= scores[k] else k)


def test_jitter_around_a_threshold_does_not_thrash() -> None:
    truth = Truth()
    threshold = next(bs for bs in range(2, MAX_BS) if truth.best(bs) != truth.best(bs - 1))
    engine = Engine(policy_for(truth, AdaptiveConfig()), truth, seed=6)
    ks = [engine.step(threshold + (t % 5) - 2) for t in range(2000)]
    assert switches(ks) <= 6


# --- exploration -------------------------------------------------------------------


def test_exploration_tries_a_k_whose_optimistic_goodput_beats_the_current_one() -> None:
    # The profile says acceptance is poor (K=0 best); live it is good. Without
    # exploration the policy never learns it; with it, it finds K >= 1.
    profiled = dict(rates=(0.05,) * MAX_K)
    truth = Truth()
    config = AdaptiveConfig(explore_budget=0.01)
    engine = Engine(policy_for(truth, config, **profiled), truth, seed=7)
    assert engine.policy.choose_k(8) == 0
    engine.run(6000, 8)
    assert engine.policy.exploration_steps >= 1
    assert engine.policy.exploration_steps <= 0.01 * 6000 + 1
    assert engine.policy.current_k >= 1
    quiet = Engine(policy_for(truth, NO_EXPLORATION, **profiled), truth, seed=7)
    quiet.run(6000, 8)
    assert quiet.policy.current_k == 0 and quiet.policy.exploration_steps == 0


# --- the plain reference -----------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "bs", "cost"),
    [(0.8, 8, 0.0005), (0.3, 8, 0.0005), (0.3, 32, 0.0005), (0.8, 8, 1.0)],
)
def test_a_pod_speculating_runs_k0_in_runs_as_often_as_the_reference_cost_allows(
    rate: float, bs: int, cost: float
) -> None:
    """While a K >= 1 is in force, runs of ``plain_reference_run`` K=0 steps make about
    ``plain_reference_cost`` / (K=0's loss to the K in force) of the steps, at most
    ``plain_reference_share`` (the last case: a cost that never binds), and the K in
    force resumes after each run."""
    truth = Truth(rates=(rate,) * MAX_K)
    config = AdaptiveConfig(explore_budget=0.0, plain_reference_cost=cost)
    engine = Engine(policy_for(truth, config), truth, seed=11)
    steps = 20000
    ks = engine.run(steps, bs)
    best = truth.best(bs)
    assert best >= 1 and engine.policy.current_k == best
    runs = [len(list(group)) for k, group in itertools.groupby(ks) if k == 0]
    assert runs and set(runs) == {config.plain_reference_run}
    assert sum(runs) == engine.policy.plain_reference_steps
    loss = 1.0 - truth.goodput(bs, 0) / truth.goodput(bs, best)
    share = min(config.plain_reference_share, cost / loss)
    assert abs(sum(runs) - share * steps) <= 2 * config.plain_reference_run
    for no_reference in (NO_EXPLORATION, AdaptiveConfig(plain_reference_cost=0.0)):
        off = Engine(policy_for(truth, no_reference), truth, seed=11)
        assert 0 not in off.run(steps, bs) and off.policy.plain_reference_steps == 0


def test_a_pod_at_k0_adds_no_reference_steps() -> None:
    truth = Truth(rates=(0.02,) * MAX_K)
    engine = Engine(policy_for(truth, AdaptiveConfig(explore_budget=0.0)), truth, seed=12)
    assert set(engine.run(4000, 8)) == {0}
    assert engine.policy.plain_reference_steps == 0


def test_the_plain_reference_corrects_a_profile_that_prices_k0_too_dear() -> None:
    """A profile whose K=0 is 1 ms dearer relative to K >= 1 than the machine (another
    machine's, or a noisy one) keeps K=1 in force after an acceptance collapse, 3%
    below K=0, for good without the reference; with it, K=0's own steps price K=0
    and the policy goes there (``make bench-floor``'s collapse, stop 51)."""
    serving = Truth(rates=(0.02,) * MAX_K)
    profiled = dict(drafter_ms=-1.0, rates=(0.02,) * MAX_K)
    bs = 8
    assert serving.best(bs) == 0  # the test can fail
    assert Truth(**profiled).best(bs) >= 1  # type: ignore[arg-type]
    config = AdaptiveConfig(explore_budget=0.0)
    engine = Engine(policy_for(serving, config, **profiled), serving, seed=13)
    ks = engine.run(20000, bs)
    assert engine.policy.current_k == 0
    assert all(k == 0 for k in ks[-2000:])
    without = Engine(policy_for(serving, NO_EXPLORATION, **profiled), serving, seed=13)
    assert 0 not in without.run(20000, bs)


# --- the objective -----------------------------------------------------------------


def test_the_throughput_objective_differs_from_the_ratio_when_batch_sizes_alternate() -> None:
    truth = Truth(per_token_ms=0.12)
    latency = Engine(policy_for(truth, AdaptiveConfig(explore_budget=0.0)), truth)
    throughput = Engine(
        policy_for(
            truth, AdaptiveConfig(objective="throughput", explore_budget=0.0, bs_smoothing=1.0)
        ),
        truth,
    )
    for engine in (latency, throughput):
        for t in range(3000):
            engine.step(4 if t % 2 else 64)
    assert throughput.policy.throughput > 0
    small, large = throughput.policy._best_k[4], throughput.policy._best_k[64]
    ratio_small = max(range(MAX_K + 1), key=lambda k: latency.policy._score[4][k])
    # Dinkelbach: the small steps get no more K than the per-step ratio gives them.
    assert small <= ratio_small
    assert large <= small


# --- plain decoding ----------------------------------------------------------------


def test_the_gain_over_plain_decoding_uses_the_profiled_baseline() -> None:
    truth = Truth()
    policy = policy_for(truth)
    gain = policy.gain_over_vanilla(8)
    vanilla = policy.vanilla_goodput(8)
    assert gain is not None and vanilla is not None
    chosen = max(policy.explain(8).values(), key=lambda e: e.goodput)
    assert gain == pytest.approx(chosen.goodput / vanilla)
    collapsed = policy_for(truth, rates=(0.0,) * MAX_K)
    low = collapsed.gain_over_vanilla(8)
    assert low is not None and low < 1.0  # K=0 with speculation costs more than vanilla


def test_a_k_unavailable_at_the_new_batch_size_is_left_at_once() -> None:
    """K=2 is measured at small batches only; when the batch grows the policy drops it."""
    import yaml

    from specdeploy.runtime.profile import parse_profile
    from tests.paths import FIXTURES

    doc = parse_profile(yaml.safe_load((FIXTURES / "profile-small.yaml").read_text()))
    policy = AdaptivePolicy.from_profile(doc, AdaptiveConfig(explore_budget=0.0), max_batch_size=16)
    assert 2 in policy.explain(1) and 2 not in policy.explain(16)
    while policy.choose_k(1) != 2:
        pass
    ks = [policy.choose_k(16) for _ in range(40)]
    assert ks[-1] in policy.explain(16)
    assert ks.count(2) <= 12  # only while the smoothed batch size still says K=2 is there


def test_a_k_whose_steps_cost_other_than_profiled_is_priced_per_k() -> None:
    """The case vLLM's CPU server showed: the profile priced speculation's own cost far
    above what the serving engine pays, and the workload drafts less than profiled. One
    shared scale made K=0 look cheap next to the observed K and kept the policy there;
    a ratio per observed K prices each K as it runs, and a K never run keeps ratio 1."""
    profiled = Truth(drafter_ms=3.0)
    serving = Truth(drafter_ms=0.0, rates=(0.5, 0.5, 0.5, 0.5), drafting=0.3)
    assert serving.best(1) > 0 and profiled.best(1) > 0
    assert Truth(drafter_ms=3.0, rates=serving.rates, drafting=serving.drafting).best(1) == 0
    engine = Engine(policy_for(profiled), serving, seed=5)
    ks = engine.run(3000, 1)
    tail = ks[-1000:]
    assert sum(k > 0 for k in tail) >= 900
    best = serving.goodput(1, serving.best(1))
    assert np.mean([serving.goodput(1, k) for k in tail]) >= 0.98 * best
    ratios = engine.policy._cost.k_ratio
    served = max(set(tail), key=tail.count)
    # relative to the K it serves, K=0 runs dearer than the profile said (no drafter cost)
    assert ratios[0] / ratios[served] > 1.2
    for k in range(MAX_K + 1):
        if k not in ks:
            assert ratios[k] == 1.0


def test_a_machine_that_verifies_dearer_is_priced_by_the_tokens_it_verifies() -> None:
    """#31's CPU case: a profile from a machine that verifies drafts cheaply, served on
    one where each draft token costs 20x the profile's slope; a step without drafts
    costs the same. The n-gram-like drafter proposes in half of the sequence-steps, so
    the K it runs verifies different numbers of tokens from step to step: the live
    slope is learnt from that, every K is priced with it, and the policy leaves the K
    it runs for K=0 with no exploration. A scale and a ratio per K, fitted to the
    mean of the K it runs, rank the K as the profile did and keep it there."""
    profiled = Truth(drafting=0.5)
    serving = Truth(drafting=0.5, draft_token_ms=1.0)
    bs = 8
    assert profiled.best(bs) == MAX_K and serving.best(bs) == 0  # the test can fail
    engine = Engine(policy_for(profiled), serving, seed=8)
    ks = engine.run(2000, bs)
    assert engine.policy.exploration_steps == 0
    assert ks.index(0) <= 200
    assert all(k == 0 for k in ks[-1000:])
    # The 64 steps at K=4 are the only ones whose tokens varied: the estimate is shrunk
    # toward the profile's price by the prior's 16 pseudo-steps (64 / 80 of the way).
    d = engine.policy.estimates().draft_token_cost_ms
    bucket = next(cost for (lo, hi), cost in d.items() if lo <= bs <= hi)
    assert 0.7 <= bucket <= 1.05
    # Every K is priced near what the serving machine costs, not only the one it ran.
    for k, estimate in engine.policy.explain(bs).items():
        verified = bs * (1 + serving.drafting * k)
        truth = serving.itl_ms(bs, k, verified, bs * serving.context)
        profiled_price = profiled.itl_ms(bs, k, verified, bs * profiled.context)
        assert profiled_price + 0.7 * (truth - profiled_price) <= estimate.itl_ms, k
        assert estimate.itl_ms <= 1.05 * truth, k


def test_without_the_live_draft_token_cost_the_dearer_machine_pins_the_profiles_k(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The previous test's case, the estimator's slope switched off: it can fail."""
    from specdeploy.runtime.policy.estimators import CostEstimator

    monkeypatch.setattr(CostEstimator, "_refit_draft_cost", lambda self: None)
    profiled = Truth(drafting=0.5)
    serving = Truth(drafting=0.5, draft_token_ms=1.0)
    engine = Engine(policy_for(profiled), serving, seed=8)
    ks = engine.run(2000, 8)
    assert 0 not in ks[-1000:]


def test_a_uniformly_slower_machine_is_a_scale_and_not_a_draft_token_cost() -> None:
    """An EAGLE-like drafter proposes K every step: one K says nothing of what a draft
    token costs, and two K that both run twice as slow as profiled say it is as
    profiled; the scale takes the slowdown."""
    profiled = Truth()
    serving = Truth(scale=2.0)
    engine = Engine(policy_for(profiled), serving, seed=9)
    engine.run(1280, 32)
    estimates = engine.policy.estimates()
    # 0.1 ms is what a verified token costs on the serving machine
    assert all(abs(cost) <= 0.002 for cost in estimates.draft_token_cost_ms.values())
    assert estimates.global_cost_scale == pytest.approx(2.0, rel=0.05)


def test_steps_at_two_k_tell_an_eagle_like_pod_what_drafts_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An EAGLE-like drafter proposes K every step, so the steps of one K say nothing
    of the slope: the excess goes to the scale and r_K, K=0 included. Steps at a
    second K at the same batch size (here the policy's own move from K=4 to K=3)
    tell it, and the policy goes on to K=0; with the slope off it stays at K=3. (No
    plain reference: its K=0 steps would price K=0 directly, another mechanism.)"""
    from specdeploy.runtime.policy.estimators import CostEstimator

    profiled = Truth()
    serving = Truth(draft_token_ms=0.2)
    bs = 32
    assert profiled.best(bs) == MAX_K and serving.best(bs) == 0  # the test can fail
    config = AdaptiveConfig(plain_reference_share=0.0)
    engine = Engine(policy_for(profiled, config), serving, seed=10)
    ks = engine.run(2000, bs)
    assert ks.index(0) <= 400
    assert all(k == 0 for k in ks[-1000:])
    monkeypatch.setattr(CostEstimator, "_refit_draft_cost", lambda self: None)
    without = Engine(policy_for(profiled, config), serving, seed=10)
    assert 0 not in without.run(2000, bs)


def test_an_exploration_step_that_carried_a_prefill_is_run_again() -> None:
    """Only a step without a prefill is timed, and a step time is what exploring is for."""
    truth = Truth()
    policy = policy_for(truth, AdaptiveConfig(explore_budget=0.01), rates=(0.05,) * MAX_K)
    k = policy.choose_k(8)
    untimed = StepRecord(8, k, None, [0] * MAX_K, [0] * MAX_K, [0] * MAX_K, decode_sequences=8)
    for _ in range(64):  # until the first rebuild plans an exploration
        policy.observe(untimed)
        if policy._explore_k >= 0:
            break
    explored = policy.choose_k(8)
    assert explored != k and policy.exploration_steps == 1
    policy.observe(StepRecord(8, explored, None, [0] * MAX_K, [0] * MAX_K, [0] * MAX_K,
                              decode_sequences=8))  # fmt: skip
    assert policy.choose_k(8) == explored  # again: the first carried a prefill
    assert policy.exploration_steps == 1  # a retry is not a second exploration
    policy.observe(StepRecord(8, explored, 0.01, [0] * MAX_K, [0] * MAX_K, [0] * MAX_K,
                              decode_sequences=8, verified_tokens=8))  # fmt: skip
    assert policy.choose_k(8) == k  # timed: back to the K in force


def test_a_rarely_run_ks_evidence_outlives_the_k_in_force_and_fades_on_the_slow_clock() -> None:
    """The cost model forgets per K: 100 K=0 steps that ran 20% cheaper than profiled
    still price K=0 after 20,000 steps at K=2 (one shared clock would have left 0.1% of
    them), and fade on the clock 16x slower over all steps."""
    from specdeploy.runtime.policy.estimators import CostEstimator

    truth = Truth()
    estimator = CostEstimator(
        profile_model(truth), max_batch_size=MAX_BS, prior_weight=16.0, half_life_steps=2000.0
    )
    bs = 8

    def run(k: int, steps: int, factor: float) -> None:
        verified = bs * (1 + k)
        ms = factor * truth.itl_ms(bs, k, verified, bs * truth.context)
        for done in range(steps):
            estimator.add(bs, k, verified, int(bs * truth.context), ms)
            if done % 1024 == 1023:
                estimator.fold()
        estimator.fold()

    run(2, 2000, 1.0)  # the K in force, as profiled: the scale stays 1
    run(0, 100, 0.8)
    learned = float(estimator.k_ratio[0])
    assert learned < 0.85
    run(2, 20000, 1.0)
    kept = float(estimator.k_ratio[0])
    assert kept < 0.87  # an estimator with one clock would be back at ~1.0
    run(2, 16 * 2000 * 4, 1.0)  # four slow half-lives
    assert float(estimator.k_ratio[0]) > kept + 0.5 * (1.0 - kept)
