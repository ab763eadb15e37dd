"""The pure parts of bench/wrong_machine_cpu.py (the runs need vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import wrong_machine_cpu as bench
from bench.addon_policy_ab import verdict, write_result


def runs(**tps: list[float]) -> dict[str, list[dict[str, object]]]:
    return {
        name: [{"client": {"output_throughput": x, "mean_tpot_ms": 1000.0 / x}} for x in values]
        for name, values in tps.items()
    }


def test_the_order_changes_every_round_so_no_server_always_runs_first() -> None:
    names = ["plain", "fixed:1", "fixed:3", "adaptive"]
    orders = [bench.rotated(names, r) for r in range(4)]
    assert all(sorted(o) == sorted(names) for o in orders)
    assert len({o[0] for o in orders}) >= 3


def test_adaptive_is_paired_with_the_best_other_server_of_the_same_round() -> None:
    ratios = bench.ratios(
        runs(plain=[100.0, 80.0, 90.0], **{"fixed:1": [90.0, 95.0, 85.0]},
             adaptive=[99.0, 94.0, 89.0])
    )  # fmt: skip
    best = ratios["adaptive/best"]
    assert best["mean"] == pytest.approx((0.99 * 94 / 95 * 89 / 90) ** (1 / 3))
    assert ratios["adaptive/plain"]["n"] == 3


def test_the_verdict_needs_the_whole_interval_on_one_side_of_the_target() -> None:
    target = bench.TARGET
    assert verdict({"mean": 1.0, "low": 0.991, "high": 1.01}, target) == "met"
    assert verdict({"mean": 0.95, "low": 0.93, "high": 0.98}, target) == "missed"
    assert verdict({"mean": 1.0, "low": 0.9, "high": 1.1}, target) == "not resolved"


def test_the_verdict_server_is_the_best_on_its_mean_not_the_best_of_each_round() -> None:
    # plain and fixed:1 tie in truth; their noise makes each round's max beat both
    measured = runs(
        plain=[100.0, 96.0, 101.0, 97.0], **{"fixed:1": [96.0, 100.0, 97.0, 101.5]},
        adaptive=[99.0, 99.0, 99.0, 99.0],
    )  # fmt: skip
    assert bench.best_on_mean(measured) == "fixed:1"
    ratios = bench.ratios(measured)
    assert ratios["adaptive/best"]["mean"] < ratios["adaptive/fixed:1"]["mean"]


def test_a_per_level_option_takes_one_value_for_all_levels_or_one_each() -> None:
    assert bench.per_level("30", 3) == [30, 30, 30]
    assert bench.per_level("30,24,10", 3) == [30, 24, 10]
    with pytest.raises(ValueError, match="2 values for 3"):
        bench.per_level("30,24", 3)


def test_the_record_names_the_verdict_server_and_each_level_s_rounds() -> None:
    measured = runs(plain=[100.0, 98.0], adaptive=[99.5, 99.0])
    for name, rounds in measured.items():
        for r in rounds:
            r["addon_steps_before"] = 10.0
            r["steps_by_k"] = {"0": 64.0} if name == "adaptive" else {}
    level = bench.judged(
        {"concurrency": 1, "repeats": 2, "requests_per_stream": 2, "runs": measured}
    )
    result = {
        "servers": ["plain", "adaptive"], "vllm": "0.32.0", "machine": "CPU-x", "isa": "avx2",
        "isa_env": "", "profile": "p.yaml", "profiled_on": "CPU-y", "schedule": [[1, 16, 3]],
        "allowed_k": "0,1", "prompts": 8, "max_tokens": 64, "wall_s": 60.0,
        "load_average_start": [0.1], "load_average_end": [0.2], "levels": [level],
    }  # fmt: skip
    row = next(line for line in bench.markdown(result).splitlines() if line.startswith("| 1 |"))
    assert "| 2 x 2 |" in row and "| plain |" in row


def test_decode_speed_pairs_each_round_s_tpot_the_other_server_s_over_the_add_on_s() -> None:
    measured = runs(plain=[100.0, 80.0], adaptive=[110.0, 80.0])
    decode = bench.decode_ratios(measured)["adaptive/plain"]
    assert decode["mean"] == pytest.approx((1.1 * 1.0) ** 0.5)
    assert decode["n"] == 2


def test_a_re_render_keeps_the_hand_written_reading_and_replaces_the_tables(
    tmp_path: Path,
) -> None:
    (tmp_path / "x.md").write_text("# old table\n\n## Reading\n\nwhat the run showed\n")
    write_result(tmp_path, "x", {"a": 1}, "# new table\n", keep_reading=True)
    text = (tmp_path / "x.md").read_text()
    assert text == "# new table\n\n## Reading\n\nwhat the run showed\n"
    write_result(tmp_path, "x", {"a": 1}, "# a fresh run\n")
    assert (tmp_path / "x.md").read_text() == "# a fresh run\n"
