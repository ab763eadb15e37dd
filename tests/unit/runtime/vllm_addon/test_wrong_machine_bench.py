"""The pure parts of bench/wrong_machine_cpu.py (the runs need vLLM)."""

from __future__ import annotations

import pytest

from bench import wrong_machine_cpu as bench
from bench.addon_policy_ab import verdict


def runs(**tps: list[float]) -> dict[str, list[dict[str, object]]]:
    return {
        name: [{"client": {"output_throughput": x}} for x in values] for name, values in tps.items()
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
