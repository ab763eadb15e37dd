"""The pure arithmetic of bench/autoscale_capacity.py, on cases with known answers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

# bench/ is scripts beside the package; the checkout's root is on pytest's path.
from bench.autoscale_capacity import (
    Interval,
    Loop,
    first_request_split,
    host_kept_up,
    interval,
    k_shares,
    markdown,
    mean_decode_context,
    predictions,
    prefill_aware_rate,
    relative_error,
    render,
    result_stem,
    summary,
    time_scale_for,
    tpot_window_means,
    window_rates,
)
from e2e.emulated.workloads import Workload
from specdeploy.runtime.capacity import Capacity, Limit
from specdeploy.runtime.profile import ProfileSpec
from specdeploy.runtime.schedule import derive_schedule
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.profiling import profile_preset

pytestmark = pytest.mark.unit


def test_window_rates_are_counter_deltas_over_time() -> None:
    samples = [(0.0, 0.0), (2.0, 100.0), (3.0, 160.0), (7.0, 160.0)]
    assert window_rates(samples) == [50.0, 60.0, 0.0]


def test_window_rates_refuse_samples_out_of_order() -> None:
    with pytest.raises(ValueError, match="time order"):
        window_rates([(1.0, 0.0), (1.0, 5.0)])


def test_interval_of_batch_means_uses_student_t() -> None:
    got = interval([9.0, 11.0, 10.0, 10.0])
    # sd = sqrt(2/3), se = sd/2, t(3) = 3.182
    assert got.mean == 10.0
    assert got.half_width == pytest.approx(3.182 * (2 / 3) ** 0.5 / 2, rel=1e-3)


def test_interval_of_one_value_has_no_half_width() -> None:
    assert interval([4.0]).as_dict() == {"mean": 4.0, "halfWidth": None}
    with pytest.raises(ValueError):
        interval([])


def test_relative_error_is_positive_when_the_model_promises_too_much() -> None:
    assert relative_error(110.0, 100.0) == pytest.approx(0.10)
    assert relative_error(90.0, 100.0) == pytest.approx(-0.10)
    with pytest.raises(ValueError):
        relative_error(1.0, 0.0)


def _cap(batch: int, tpot_s: float) -> Capacity:
    return Capacity(batch, 1, batch / tpot_s, tpot_s, Limit.LATENCY)


def test_time_scale_keeps_the_stream_rate_under_the_bound() -> None:
    # 200 sequences, 10 ms TPOT, AL 2: a 20 ms step, 10,000 chunks per modelled second.
    assert time_scale_for(_cap(200, 0.010), 2.0, max_chunks=2500.0) == pytest.approx(4.0)
    # A light load runs in real time, never faster.
    assert time_scale_for(_cap(4, 0.010), 2.0, max_chunks=2500.0) == 1.0


def test_first_requests_are_length_biased_requests_caught_at_a_uniform_point() -> None:
    rng = random.Random(7)
    lo, hi = 256, 768
    draws = [first_request_split(rng, (lo, hi)) for _ in range(20_000)]
    assert all(left >= 1 and done >= 0 and lo <= left + done <= hi for left, done in draws)
    # Both halves of a length-biased request average E[n^2] / (2 E[n]), the steady
    # state's mean decode context (without the prompt).
    steady = mean_decode_context(0, (lo, hi))
    assert sum(left for left, _ in draws) / len(draws) == pytest.approx(steady, rel=0.02)
    assert sum(done for _, done in draws) / len(draws) == pytest.approx(steady, rel=0.02)


def test_first_request_split_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError):
        first_request_split(random.Random(0), (10, 5))


def test_mean_decode_context_by_hand() -> None:
    # Every request 100 tokens: met at a uniform point, 50 on average (plus the prompt).
    assert mean_decode_context(30.0, (100, 100)) == pytest.approx(80.0)
    # Lengths 1 or 3 (uniform on 1..3): E[n] = 2, E[n^2] = 14/3, so 7/6.
    assert mean_decode_context(0.0, (1, 3)) == pytest.approx(7 / 6)


def test_prefill_aware_rate_without_prefill_is_the_plain_rate() -> None:
    plain = prefill_aware_rate(20.0, 0.05, batch=100, al=2.0, prompt_per_output=0.0)
    assert plain == pytest.approx(100 * 2.0 / 0.020)


def test_prefill_aware_rate_prices_each_prompt_token_like_a_verified_one() -> None:
    # 100 sequences x AL 2 = 200 tokens a step, 0.25 prompt tokens each: 50 prompt tokens
    # at 0.1 ms make the 20 ms step 25 ms.
    got = prefill_aware_rate(20.0, 0.1, batch=100, al=2.0, prompt_per_output=0.25)
    assert got == pytest.approx(200 / 0.025)


def test_tpot_window_means_group_requests_by_when_they_ended() -> None:
    ends = [(0.5, 0.02), (1.5, 0.04), (1.7, 0.06), (2.5, None), (3.5, 0.08)]
    # Wall TPOTs at time scale 2: modelled TPOT is half; the window [2, 3) has none.
    assert tpot_window_means(ends, [1.0, 2.0, 3.0, 4.0], 2.0) == pytest.approx([0.025, 0.04])


def test_host_kept_up_within_its_share_of_the_wall_time() -> None:
    assert host_kept_up(0.1, 10.0, share=0.02)
    assert not host_kept_up(0.3, 10.0, share=0.02)
    assert not host_kept_up(None, 10.0)  # no stop line: nothing says it kept up


def test_k_shares() -> None:
    assert k_shares({0: 0.0, 2: 30.0, 1: 10.0}) == {1: 0.25, 2: 0.75}
    assert k_shares({}) == {}


def _row(error: float | None) -> dict[str, object]:
    row: dict[str, object] = {"gpu": "G", "workload": "chat", "tpotTargetMs": 12.0}
    if error is None:
        return row
    row.update(
        predicted={"batchSize": 8, "k": 2, "tokensPerSecond": 1100.0, "tpotSeconds": 0.01},
        measured={
            "tokensPerSecond": Interval(1000.0, 20.0).as_dict(),
            "tpotSeconds": Interval(0.011, 0.0005).as_dict(),
            "meanRunning": 8.0,
            "timeScale": 1.0,
            "promptTokensPerOutputToken": 0.1,
        },
        relativeError=error,
        diagnosis={
            "contextAwareTokensPerSecond": 1050.0,
            "contextAwareError": 0.05,
            "prefillAwareTokensPerSecond": 990.0,
            "prefillAwareError": -0.01,
        },
    )
    return row


def test_summary_counts_cases_within_the_target() -> None:
    got = summary([_row(0.05), _row(-0.12), _row(None), _row(0.10)])
    assert {k: got[k] for k in ("measured", "within", "maxAbsError", "target")} == {
        "measured": 3,
        "within": 2,
        "maxAbsError": 0.12,
        "target": 0.10,
    }
    assert got["meanSignedError"] == pytest.approx(
        {"replica_capacity": 0.01, "at loop context": 0.05, "and prefill priced": -0.01}
    )


def test_markdown_has_a_row_per_case_and_says_modelled() -> None:
    cases = [_row(0.1), _row(None)]
    doc = {
        "command": "c",
        "commit": "abc",
        "machine": "m",
        "wallSeconds": 1.0,
        "cases": cases,
        "summary": summary(cases),
    }
    text = markdown(doc)
    assert "MODELLED" in text
    assert "| 1100 | 1000 ± 20 | +10.0% | 10.00 | 11.00 ± 0.50 |" in text
    assert "| 0.100 | 1050 (+5.0%) | 990 (-1.0%) |" in text
    assert "no batch meets the target" in text
    assert "1 of 1 measured cases within ±10%" in text
    assert "replica_capacity +10.0%, at loop context +5.0%, and prefill priced -1.0%" in text


def test_render_rewrites_the_table_beside_a_recorded_run(tmp_path: Path) -> None:
    cases = [_row(0.1)]
    doc = {"command": "c", "commit": "abc", "machine": "m", "wallSeconds": 1.0}
    recorded = tmp_path / "autoscale_capacity.json"
    recorded.write_text(json.dumps({**doc, "cases": cases, "summary": summary(cases)}))
    render(recorded)
    assert "| 1100 | 1000 ± 20 | +10.0% |" in (tmp_path / "autoscale_capacity.md").read_text()


def test_result_stem_names_how_a_run_differs_from_the_default() -> None:
    assert result_stem(Loop()) == "autoscale_capacity"
    assert result_stem(Loop(prompt="hi")) == "autoscale_capacity_one_word_prompts"
    assert result_stem(Loop((10, 20))) == "autoscale_capacity_outputs_10_20"


@pytest.fixture(scope="module")
def profile() -> ProfileSpec:
    preset = get_preset("llama8b-eagle3-h200")
    doc = profile_preset(preset, batch_sizes=(1, 4, 16, 64))
    return doc.with_schedule(derive_schedule(doc.spec)).spec


def test_chat_predictions_use_the_profiles_schedule(profile: ProfileSpec) -> None:
    schedule, caps = predictions(
        profile, Workload.CHAT, profile.acceptance.per_position, [0.005, 1.0]
    )
    assert profile.schedule is not None
    assert schedule == [tuple(r) for r in profile.schedule]
    tight, loose = caps
    assert tight is not None and loose is not None
    assert tight.tpot_seconds <= 0.005 and tight.batch_size <= loose.batch_size


def test_random_predictions_rederive_a_lower_k_schedule(profile: ProfileSpec) -> None:
    collapsed = (0.02,) * profile.fingerprint.max_k
    schedule, caps = predictions(profile, Workload.RANDOM, collapsed, [1.0])
    assert max(k for _, _, k in schedule) <= 1
    chat, _ = predictions(profile, Workload.CHAT, profile.acceptance.per_position, [1.0])
    assert max(k for _, _, k in chat) > max(k for _, _, k in schedule)
    assert caps[0] is not None
