"""The paired reading of bench/addon_policy_ab.py (the A/B itself needs the vLLM CPU server)."""

from __future__ import annotations

import math

import pytest

from bench.addon_policy_ab import k_shares, paired


def test_paired_ratios_read_as_a_geometric_mean_with_a_t_interval() -> None:
    result = paired([1.1, 1.0 / 1.1, 1.1, 1.0 / 1.1])
    assert result["mean"] == pytest.approx(1.0)
    assert result["low"] < 1.0 < result["high"]
    assert result["n"] == 4
    # the interval scales with the spread of the log ratios
    tight = paired([1.02, 1.0 / 1.02, 1.02, 1.0 / 1.02])
    shrink = math.log(1.02) / math.log(1.1)
    assert math.log(tight["high"]) == pytest.approx(math.log(result["high"]) * shrink)


def test_a_consistent_loss_excludes_one() -> None:
    result = paired([0.95, 0.96, 0.94, 0.95])
    assert result["high"] < 1.0


def test_k_shares_sum_over_the_runs() -> None:
    runs = [{"steps_by_k": {"0": 0.0, "2": 30.0}}, {"steps_by_k": {"1": 10.0, "2": 60.0}}]
    assert k_shares(runs) == "K1:10% K2:90%"
    assert k_shares([{"steps_by_k": {}}]) == "-"
