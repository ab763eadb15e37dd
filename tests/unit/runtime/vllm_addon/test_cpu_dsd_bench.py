"""The pure parts of bench/cpu_dsd.py and bench/step_trace.py (the runs need vLLM's CPU server)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.cpu_dsd import (
    interval,
    parse_requests,
    policies,
    ratio_of,
    step_seconds,
    table_k,
    trace_summary,
    vanilla_ok,
)
from bench.step_trace import StepTrace, read_trace
from bench.vllm_server import speculative_config

PROFILE: dict[str, Any] = {
    "spec": {
        "fingerprint": {"maxK": 3},
        "schedule": [[1, 2, 3], [3, 16, 0]],
        "measurements": [
            {"batchSize": 4, "k": 0, "itlMs": 40.0, "itlHalfWidthMs": 2.0},
        ],
    }
}


def step(
    start: float,
    end: float,
    *,
    batch: int = 4,
    decode: bool = True,
    k: int = 0,
    tokens: int | None = None,
    drafts: int = 0,
    draft_tokens: int = 0,
    accepted: int = 0,
) -> StepTrace:
    verified = batch + draft_tokens
    emitted = batch + accepted if tokens is None else tokens
    return StepTrace(
        start,
        end,
        batch,
        decode,
        k,
        verified,
        drafts,
        draft_tokens,
        accepted,
        emitted,
        100 * batch,
        5.0,
    )


def test_a_step_runs_to_the_next_start_only_while_the_engine_is_busy() -> None:
    steps = [step(0.0, 0.038), step(0.040, 0.078), step(1.0, 1.04)]
    seconds = step_seconds(steps)
    assert seconds[0] == pytest.approx(0.040)  # the 2 ms gap is the engine's own loop
    assert seconds[1] == pytest.approx(0.038)  # 0.92 s idle after it: ends at its update
    assert seconds[2] == pytest.approx(0.040)


def test_the_summary_counts_decode_steps_at_the_batch_size_only() -> None:
    steps = [
        step(0.00, 0.04, k=2, drafts=2, draft_tokens=4, accepted=2),
        step(0.04, 0.08, k=2, drafts=4, draft_tokens=8, accepted=4),
        step(0.08, 0.20, decode=False, tokens=3),  # a prefill rides along: not decode
        step(0.20, 0.23, batch=3, k=2),
    ]
    got = trace_summary(steps, 4)
    assert got["decode_steps"] == 3
    assert got["steps_at_batch"] == 2
    assert got["step_ms_at_batch"] == pytest.approx(40.0)
    # 6 + 8 tokens over two steps of 4 sequences x 0.04 s
    assert got["goodput_at_batch"] == pytest.approx((6 + 8) / (4 * 0.04 + 4 * 0.04))
    assert got["tokens_per_sequence_step"] == pytest.approx((6 + 8 + 3) / 11)
    assert got["drafting_rate"] == pytest.approx(6 / 11)
    assert got["acceptance"] == pytest.approx(6 / 12)
    assert got["k_steps"] == {"2": 3}
    assert got["context_per_sequence_at_batch"] == pytest.approx(100.0)


def test_the_trace_file_is_cut_by_time_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    rows = [list(step(float(t), t + 0.04)) for t in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[1.0, 2")
    got = list(read_trace(path, since=0.5, until=2.5))
    assert [s.start for s in got] == [1.0, 2.0]
    assert list(read_trace(tmp_path / "missing.jsonl")) == []


def test_the_sanity_check_compares_with_the_profiles_k0_upper_bound() -> None:
    slow = {"trace": {"step_ms_at_batch": 42.5}}
    fine = {"trace": {"step_ms_at_batch": 41.9}}
    assert vanilla_ok(fine, PROFILE, 4) is True
    assert vanilla_ok(slow, PROFILE, 4) is False
    assert vanilla_ok(fine, PROFILE, 16) is None  # no K=0 cell there: nothing to check
    assert vanilla_ok({"trace": {"step_ms_at_batch": math.nan}}, PROFILE, 4) is None


def test_policies_cover_vanilla_every_fixed_k_both_tables_and_adaptive() -> None:
    names = [p.name for p in policies(PROFILE)]
    assert names == [
        "vanilla",
        "fixed:1",
        "fixed:2",
        "fixed:3",
        "vllm-table",
        "addon-table",
        "addon-adaptive",
    ]
    shared = {p.name: p.addon_table for p in policies(PROFILE) if p.server == "addon"}
    assert shared == {
        "fixed:1": ("fixed", 1),
        "fixed:2": ("fixed", 2),
        "fixed:3": ("fixed", 3),
        "addon-table": ("table", None),
    }
    assert [table_k(PROFILE, bs) for bs in (1, 2, 3, 16, 64)] == [3, 3, 0, 0, 0]


def test_the_servers_config_is_the_table_or_a_fixed_k() -> None:
    table = speculative_config(PROFILE)
    assert table["num_speculative_tokens"] == 3
    assert table["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 16, 0]]
    fixed = speculative_config(PROFILE, 2)
    assert fixed["num_speculative_tokens"] == 2
    assert "num_speculative_tokens_per_batch_size" not in fixed


def test_intervals_and_paired_ratios() -> None:
    i = interval([10.0, 12.0, math.nan, 11.0])
    assert i["mean"] == pytest.approx(11.0) and i["n"] == 3 and i["half"] > 0
    assert interval([5.0])["half"] == math.inf
    same = ratio_of([10.0, 20.0, 30.0], [10.0, 20.0, 30.0])
    assert same["mean"] == pytest.approx(1.0) and same["low"] == pytest.approx(1.0)
    loss = ratio_of([9.5, 19.0, 28.4], [10.0, 20.0, 30.0])
    assert loss["high"] < 1.0
    assert parse_requests("1:4,16:16") == {1: 4, 16: 16}
