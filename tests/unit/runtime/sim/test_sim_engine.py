"""The continuous-batching engine: conservation, determinism, loops, policy feedback."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from specdeploy.runtime.goodput import acceptance_length, conditional_counts
from specdeploy.runtime.policy.base import KPolicy, StepRecord
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.sim.acceptance import Drifting, Profile
from specdeploy.runtime.sim.drafts import NgramDrafter
from specdeploy.runtime.sim.engine import EngineConfig, simulate
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.workload import (
    ClosedLoop,
    Lengths,
    OpenLoop,
    OscillatingLoop,
    PiecewiseRate,
    fixed,
)

LLAMA = get_preset("llama8b-eagle3-h200")


@dataclass
class Recording:
    """A policy that cycles K and keeps every observation."""

    ks: Sequence[int] = (0, 3, 1, 5)
    name: str = "recording"
    calls: list[tuple[int, int, float | None, list[int], list[int]]] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)

    def choose_k(self, batch_size: int) -> int:
        self.asked.append(batch_size)
        return self.ks[len(self.asked) % len(self.ks)]

    def observe(self, step: StepRecord) -> None:
        self.calls.append(
            (step.batch_size, step.k, step.step_seconds, list(step.reached), list(step.accepted))
        )


def test_fixed_k_is_a_k_policy() -> None:
    assert isinstance(FixedPolicy(3), KPolicy)
    assert isinstance(Recording(), KPolicy)


def test_same_seed_same_run_other_seed_other_run() -> None:
    kw = {"steps": 400, "trace": True}
    a = LLAMA.simulate(FixedPolicy(3), ClosedLoop(32), seed=1, **kw)  # type: ignore[arg-type]
    b = LLAMA.simulate(FixedPolicy(3), ClosedLoop(32), seed=1, **kw)  # type: ignore[arg-type]
    c = LLAMA.simulate(FixedPolicy(3), ClosedLoop(32), seed=2, **kw)  # type: ignore[arg-type]
    assert a.trace is not None and b.trace is not None
    assert (a.total_tokens, a.sim_seconds) == (b.total_tokens, b.sim_seconds)
    assert np.array_equal(a.trace.tokens, b.trace.tokens)
    assert a.total_tokens != c.total_tokens


def test_tokens_are_conserved_when_every_request_completes() -> None:
    # 40 requests of exactly 30 output tokens arrive in the first second, then none.
    rate = PiecewiseRate(((0.0, 40.0), (1.0, 0.0)))
    workload = OpenLoop(rate, fixed(20), fixed(30))
    result = LLAMA.simulate(FixedPolicy(4), workload, duration_s=20.0, seed=3, trace=True)
    assert result.trace is not None
    assert result.completed_requests > 10
    assert result.total_tokens == 30 * result.completed_requests
    assert int(result.trace.tokens.sum()) == result.total_tokens
    assert result.sim_seconds == pytest.approx(float(result.trace.seconds.sum()))


def test_each_step_produces_between_one_and_k_plus_one_tokens_per_sequence() -> None:
    result = LLAMA.simulate(FixedPolicy(3), ClosedLoop(64), steps=600, seed=4, trace=True)
    tr = result.trace
    assert tr is not None
    decode_only = tr.prefill_tokens == 0
    assert np.all(tr.tokens[decode_only] <= tr.decode_seqs[decode_only] * 4)
    assert np.all(tr.tokens <= tr.batch_size * 4)
    assert np.all(tr.accepted <= 3 * tr.decode_seqs)
    # Accepted counts are taken before outputs are cut at their end, as vLLM counts them.
    observed = 1.0 + tr.accepted.sum() / tr.decode_seqs.sum()
    assert observed == pytest.approx(acceptance_length(LLAMA.acceptance.nominal(), 3), abs=0.05)


def test_vanilla_produces_one_token_per_decoding_sequence_and_has_no_draft_cost() -> None:
    vanilla = LLAMA.simulate(None, ClosedLoop(16), speculative=False, steps=300, trace=True)
    k0 = LLAMA.simulate(FixedPolicy(0), ClosedLoop(16), steps=300, trace=True)
    assert vanilla.trace is not None and k0.trace is not None
    assert vanilla.mean_k == 0.0
    pure = vanilla.trace.prefill_tokens == 0
    assert np.array_equal(vanilla.trace.tokens[pure], vanilla.trace.decode_seqs[pure])
    # Same token stream; the drafter's K=0 forward makes the K=0 run slower.
    assert vanilla.total_tokens == k0.total_tokens
    assert vanilla.sim_seconds < k0.sim_seconds


def test_speculative_engine_requires_a_policy() -> None:
    with pytest.raises(ValueError, match="policy"):
        LLAMA.simulate(None, ClosedLoop(4), steps=10)
    with pytest.raises(ValueError, match="steps or duration"):
        LLAMA.simulate(FixedPolicy(1), ClosedLoop(4))


def test_closed_loop_keeps_the_batch_at_the_concurrency() -> None:
    result = LLAMA.simulate(FixedPolicy(2), ClosedLoop(48), steps=2000, seed=5, trace=True)
    assert result.trace is not None
    assert np.all(result.trace.batch_size == 48)
    assert result.completed_requests > 100  # requests did finish and were replaced
    capped = LLAMA.simulate(FixedPolicy(2), ClosedLoop(1000), steps=50, seed=5, trace=True)
    assert capped.trace is not None
    assert capped.trace.batch_size.max() == LLAMA.max_batch_size


def test_policy_sees_batch_size_and_conditional_counts() -> None:
    policy = Recording()
    result = LLAMA.simulate(policy, ClosedLoop(24), steps=300, seed=6, trace=True)
    assert result.trace is not None
    assert len(policy.calls) == 300
    assert policy.asked == result.trace.batch_size.tolist()
    for (bs, k, seconds, drafted, accepted), n_dec, prefill in zip(
        policy.calls,
        result.trace.decode_seqs.tolist(),
        result.trace.prefill_tokens.tolist(),
        strict=True,
    ):
        assert bs == 24
        # Timed only when no prefill rode along, as the vLLM add-on times steps.
        assert (seconds is None) == (prefill > 0)
        assert seconds is None or seconds > 0
        assert len(drafted) == len(accepted) == k
        if k:
            assert drafted[0] == n_dec
            assert all(a <= d for a, d in zip(accepted, drafted, strict=True))
            assert all(drafted[i + 1] == accepted[i] for i in range(k - 1))
    ks = result.trace.k.tolist()
    assert set(ks) == {0, 1, 3, 5}
    assert result.k_changes_per_1000_steps == pytest.approx(1000.0 * 299 / 300)
    assert result.mean_k == pytest.approx(float(np.mean(ks)))


def test_engine_counts_match_the_reference_conditional_counts() -> None:
    # Rebuild per-sequence accepted counts from the counts and compare with policy.base's helper.
    policy = Recording(ks=(4,))
    LLAMA.simulate(policy, ClosedLoop(8), steps=50, seed=8)
    for _, k, _, drafted, accepted in policy.calls:
        per_seq = []
        for n in range(k + 1):
            reaching = drafted[n] if n < k else accepted[k - 1]
            stopping = reaching - (accepted[n] if n < k else 0)
            per_seq += [n] * stopping
        assert conditional_counts(per_seq, k) == (drafted, accepted)


def test_observed_acceptance_matches_the_profile() -> None:
    result = LLAMA.simulate(FixedPolicy(5), ClosedLoop(128), steps=1500, seed=9)
    observed = result.acceptance_per_position()
    assert observed.size == LLAMA.max_k
    assert observed[:5] == pytest.approx(LLAMA.acceptance.nominal()[:5], abs=0.02)
    assert np.isnan(observed[5:]).all()


def test_open_loop_batch_size_follows_the_arrival_rate() -> None:
    rate = PiecewiseRate(((0.0, 4.0), (20.0, 40.0), (40.0, 4.0)))
    result = LLAMA.simulate(FixedPolicy(3), OpenLoop(rate), duration_s=60.0, seed=10, trace=True)
    tr = result.trace
    assert tr is not None

    def mean_bs(t0: float, t1: float) -> float:
        sel = (tr.end_time >= t0) & (tr.end_time < t1)
        return float(np.average(tr.batch_size[sel], weights=tr.seconds[sel]))

    low, high, low_again = mean_bs(5, 20), mean_bs(25, 40), mean_bs(45, 60)
    assert high > 4 * low
    assert high > 4 * low_again
    # Throughput follows too: roughly the arrival rate times the mean output.
    ends, rates = tr.windowed_throughput(5.0)
    assert float(rates[(ends > 25) & (ends <= 40)].mean()) > 4 * float(rates[ends <= 20].mean())


def test_windowed_throughput_adds_up_to_the_total() -> None:
    result = LLAMA.simulate(FixedPolicy(2), ClosedLoop(32), steps=1500, seed=12, trace=True)
    assert result.trace is not None
    ends, rates = result.trace.windowed_throughput(0.5)
    assert float((rates * 0.5).sum()) == pytest.approx(result.total_tokens)
    assert np.all(np.diff(ends) > 0)


def test_warmup_steps_are_run_but_not_counted() -> None:
    full = LLAMA.simulate(FixedPolicy(2), ClosedLoop(32), steps=500, seed=13)
    tail = LLAMA.simulate(FixedPolicy(2), ClosedLoop(32), steps=400, warmup_steps=100, seed=13)
    assert tail.steps == 400
    assert tail.total_tokens < full.total_tokens
    assert tail.sim_seconds < full.sim_seconds


def test_acceptance_drift_shows_in_windowed_throughput() -> None:
    drift = Drifting(Profile((0.9, 0.85, 0.8, 0.75)), Profile((0.3, 0.2, 0.1, 0.1)), at=10.0)
    result = LLAMA.simulate(
        FixedPolicy(4), ClosedLoop(16), acceptance=drift, duration_s=20.0, seed=14, trace=True
    )
    assert result.trace is not None
    ends, rates = result.trace.windowed_throughput(2.0)
    before = rates[(ends > 2) & (ends <= 10)].mean()
    after = rates[ends > 12].mean()
    assert after < 0.7 * before


def test_engine_config_validates_its_limits() -> None:
    cost = LLAMA.cost
    with pytest.raises(ValueError):
        EngineConfig(cost, LLAMA.acceptance, max_batch_size=0, max_k=3)
    with pytest.raises(ValueError, match="max_batched_tokens"):
        EngineConfig(cost, LLAMA.acceptance, 256, 7, max_batched_tokens=1024)
    assert simulate(
        EngineConfig(cost, LLAMA.acceptance, 4, 2), ClosedLoop(4), FixedPolicy(9), steps=5
    ).mean_k == pytest.approx(2.0)


def test_oscillating_loop_flickers_the_scheduled_batch_without_starving_anyone() -> None:
    workload = OscillatingLoop(low=14, high=18, period_steps=8, prompt=fixed(16), output=fixed(40))
    policy = Recording(ks=(2,))
    result = LLAMA.simulate(policy, workload, steps=800, warmup_steps=8, seed=15, trace=True)
    assert result.trace is not None
    sizes = result.trace.batch_size.tolist()
    assert sizes[:8] == [14, 14, 14, 14, 18, 18, 18, 18]
    assert set(sizes) == {14, 18}
    assert policy.asked[8:] == sizes
    # Every request finishes in bounded time: 40 tokens need at most 40 scheduled steps,
    # and each slot is left out at most every other step.
    assert result.completed_requests > 18 * 800 / 80
    assert result.mean_latency_s < 100 * result.mean_step_seconds
    with pytest.raises(ValueError):
        OscillatingLoop(low=5, high=4)


@dataclass
class Observing:
    """A fixed K that keeps every StepRecord."""

    k: int
    name: str = "observing"
    steps: list[StepRecord] = field(default_factory=list)

    def choose_k(self, batch_size: int) -> int:
        return self.k

    def observe(self, step: StepRecord) -> None:
        self.steps.append(step)


def test_prefill_steps_reach_observe_untimed_and_clean_decode_steps_timed() -> None:
    rate = PiecewiseRate(((0.0, 30.0),))
    policy = Observing(3)
    result = LLAMA.simulate(policy, OpenLoop(rate), duration_s=5.0, seed=16, trace=True)
    tr = result.trace
    assert tr is not None
    with_prefill = tr.prefill_tokens > 0
    assert with_prefill.any() and (~with_prefill).any()
    timed = np.array([s.step_seconds is not None for s in policy.steps])
    assert np.array_equal(timed, ~with_prefill)
    clean = [s.step_seconds for s in policy.steps if s.step_seconds is not None]
    assert clean == pytest.approx(tr.seconds[~with_prefill].tolist())


def test_step_records_carry_verified_and_context_tokens_of_the_decoding_sequences() -> None:
    policy = Observing(2)
    result = LLAMA.simulate(policy, ClosedLoop(16), steps=200, seed=17, trace=True)
    tr = result.trace
    assert tr is not None
    for step, n_dec, ctx in zip(policy.steps, tr.decode_seqs, tr.context, strict=True):
        assert step.decode_sequences == n_dec
        assert step.verified_tokens == 3 * n_dec  # EAGLE-3 proposes K: 1 + K each
        assert step.context_tokens == ctx
        assert step.scheduled == ([n_dec] * 2 if n_dec else [0, 0])
    assert result.verified_tokens == 3 * result.decode_seq_steps
    assert result.context_tokens == int(tr.context.sum())
    assert np.array_equal(result.reached, result.proposed)


def test_ngram_verifies_only_what_it_proposed_and_counts_missing_drafts_as_rejected() -> None:
    preset = get_preset("llama8b-ngram-a100")
    proposals = preset.proposal_model
    result = preset.simulate(FixedPolicy(4), ClosedLoop(64), steps=1500, seed=18, trace=True)
    tr = result.trace
    assert tr is not None
    pure = tr.prefill_tokens == 0
    per_seq = tr.verified[pure].sum() / tr.decode_seqs[pure].sum()
    assert per_seq == pytest.approx(1.0 + sum(proposals.survival(4)), rel=0.03)
    assert np.all(tr.verified <= 5 * tr.decode_seqs)
    assert result.drafting_rate()[:4] == pytest.approx(proposals.drafting_rate(4), abs=0.02)
    assert result.proposal_survival()[:4] == pytest.approx(proposals.survival(4), abs=0.02)
    # a_i (missing = rejected) is q_i times the acceptance given a proposal.
    observed = result.acceptance_per_position()[:4]
    assert observed == pytest.approx(preset.nominal_rates()[:4], abs=0.03)
    given = preset.acceptance.nominal()[:4]
    assert np.all(observed < np.asarray(given))


def test_fewer_verified_tokens_make_ngram_steps_cheaper_than_full_proposals() -> None:
    from specdeploy.runtime.sim.proposals import ALWAYS_FULL

    preset = get_preset("llama8b-ngram-a100")
    kw = {"steps": 600, "seed": 19}
    lookup = preset.simulate(FixedPolicy(5), ClosedLoop(128), **kw)  # type: ignore[arg-type]
    full = preset.simulate(FixedPolicy(5), ClosedLoop(128), proposals=ALWAYS_FULL, **kw)  # type: ignore[arg-type]
    assert lookup.mean_step_seconds < 0.8 * full.mean_step_seconds


def test_open_loop_arrivals_do_not_depend_on_the_policy() -> None:
    # K=0 and K=5 take very different steps; both must serve the same requests.
    rate = PiecewiseRate(((0.0, 20.0), (3.0, 2.0)))
    workload = OpenLoop(rate, fixed(30), fixed(60), horizon_s=6.0)
    slow = LLAMA.simulate(FixedPolicy(0), workload, seed=20, trace=True)
    fast = LLAMA.simulate(FixedPolicy(5), workload, seed=20, trace=True)
    assert slow.requests is not None and fast.requests is not None
    assert slow.sim_seconds > 1.2 * fast.sim_seconds
    assert sorted(slow.requests.arrival) == sorted(fast.requests.arrival)
    assert slow.completed_requests == fast.completed_requests > 50
    assert slow.total_tokens == fast.total_tokens == 60 * slow.completed_requests


def test_a_rollout_drains_every_request_and_reports_its_makespan() -> None:
    from specdeploy.runtime.sim.workload import Rollout

    workload = Rollout(40, fixed(64), Lengths(100.0, 1.0, 8, 2000))
    result = LLAMA.simulate(FixedPolicy(3), workload, seed=21, trace=True)
    tr = result.trace
    assert tr is not None
    assert result.completed_requests == 40
    assert result.end_time == pytest.approx(result.sim_seconds)  # no idle time in a drain
    assert tr.batch_size[0] == 40 and tr.batch_size[-1] == 1  # it drained to one straggler


def test_piecewise_graphs_cost_only_a_pod_with_a_table_on_the_v1_runner() -> None:
    kw = {"steps": 300, "seed": 22, "trace": True}
    v1 = replace(LLAMA, model_runner="v1")
    plain = v1.simulate(FixedPolicy(3), ClosedLoop(8), **kw)  # type: ignore[arg-type]
    table = v1.simulate(FixedPolicy(3), ClosedLoop(8), piecewise=True, **kw)  # type: ignore[arg-type]
    vanilla = v1.simulate(None, ClosedLoop(8), speculative=False, **kw)  # type: ignore[arg-type]
    assert plain.trace is not None and table.trace is not None and vanilla.trace is not None
    per_layer = v1.overheads.per_layer_s * v1.model.layers
    assert table.trace.seconds - plain.trace.seconds == pytest.approx(
        np.full(300, per_layer), rel=1e-9
    )
    assert plain.total_tokens == table.total_tokens
    with pytest.raises(ValueError, match="table"):
        LLAMA.simulate(None, ClosedLoop(8), speculative=False, piecewise=True, steps=5)
    # Vanilla pays neither the table's graphs nor speculation's overheads.
    assert vanilla.mean_step_seconds < plain.mean_step_seconds
    # vLLM 0.32 runs EAGLE-3 on the V2 runner, which keeps full graphs with a table.
    assert LLAMA.runner == "v2"
    v2_plain = LLAMA.simulate(FixedPolicy(3), ClosedLoop(8), **kw)  # type: ignore[arg-type]
    v2_table = LLAMA.simulate(FixedPolicy(3), ClosedLoop(8), piecewise=True, **kw)  # type: ignore[arg-type]
    assert v2_table.sim_seconds == v2_plain.sim_seconds


@pytest.mark.parametrize(
    ("method", "runner"), [("ngram", "v2"), ("eagle3", "v2"), ("suffix", "v1")]
)
def test_the_runner_is_vllms_choice_for_the_method(method: str, runner: str) -> None:
    drafter = replace(NgramDrafter(), method=method)
    assert replace(LLAMA, drafter=drafter).runner == runner
    with pytest.raises(ValueError, match="model_runner"):
        replace(LLAMA, model_runner="v3")


def test_every_change_of_k_pays_the_switch_cost() -> None:
    from dataclasses import replace

    from specdeploy.runtime.sim.step_time import Overheads

    free = replace(LLAMA, overheads=Overheads(k_switch_s=0.0))
    kw = {"steps": 200, "seed": 23, "trace": True}
    paid = LLAMA.simulate(Recording(ks=(1, 3)), ClosedLoop(8), **kw)  # type: ignore[arg-type]
    gratis = free.simulate(Recording(ks=(1, 3)), ClosedLoop(8), **kw)  # type: ignore[arg-type]
    assert paid.trace is not None and gratis.trace is not None
    changes = np.flatnonzero(np.diff(paid.trace.k) != 0) + 1
    extra = paid.trace.seconds - gratis.trace.seconds
    assert extra[changes] == pytest.approx(np.full(changes.size, 1e-3), rel=1e-9)
    assert np.delete(extra, changes)[1:] == pytest.approx(0.0, abs=1e-15)
