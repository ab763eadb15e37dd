"""The tier table (root tiers.py) names real tests, and a run's report adds up.

A row that names a renamed test would silently move nothing (or, for a
``per_change`` row under a nightly module, drop a must-stay test from
``make test``), so every row must name a test function that exists, and a
parametrized row an id that function really has.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from e2e.chaos.scenarios import matrix
from tests import tier_report, tiers
from tests.paths import ROOT
from tests.tier_report import Cost


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def strings_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


@pytest.mark.parametrize("row", sorted(tiers.TIER_BY_NODEID))
def test_every_tier_row_names_a_module_and_a_test_in_it(row: str) -> None:
    module, _, rest = row.partition("::")
    path = ROOT / module
    assert path.is_file(), row
    if rest:
        function, _, param = rest.partition("[")
        assert function in functions_in(path), row
        if param:
            # an id is a chaos scenario's, or a string the module parametrizes with
            ids = {s.id for s in matrix()} if module.endswith("test_chaos.py") else strings_in(path)
            assert param.rstrip("]") in ids, row


def test_the_longest_row_decides_a_tests_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    chaos = tiers.CHAOS
    table = {**tiers.TIER_BY_NODEID, f"{chaos}[C1a-n5]": (tiers.PER_CHANGE, "kept")}
    monkeypatch.setattr(tiers, "TIER_BY_NODEID", table)
    assert tiers.tier_of(f"{chaos}[C4]") == tiers.NIGHTLY
    assert tiers.tier_of(f"{chaos}[C1a-n5]") == tiers.PER_CHANGE
    assert tiers.tier_of(f"{chaos}[C1a-n5x]") == tiers.NIGHTLY  # a row is no prefix of a longer id
    assert tiers.tier_of("tests/model/test_drafts_vllm.py::test_x") == tiers.NIGHTLY
    assert tiers.tier_of("tests/model/test_drafts_vllm.pyc::test_x") == tiers.PER_CHANGE
    assert tiers.tier_of("tests/unit/repo/test_tooling.py::test_x") == tiers.PER_CHANGE


def test_the_per_change_tier_keeps_the_faults_the_chaos_matrix_left_to_nightly() -> None:
    """No chaos scenario runs per change; an operator killed with SIGKILL (a standby takes
    over and converges) and one restarted mid-profiling (no Job duplicated) do."""
    ids = {s.id for s in matrix()}
    assert all(tiers.tier_of(f"{tiers.CHAOS}[{i}]") == tiers.NIGHTLY for i in ids)
    kept = {
        "e2e/tests/cluster/test_cluster_leader_election.py": (
            "test_of_two_replicas_only_the_leader_writes_and_the_standby_takes_over_after_a_kill"
        ),
        "e2e/tests/cluster/test_operator_lifecycle.py": (
            "test_an_operator_restart_during_profiling_duplicates_nothing"
        ),
    }
    for module, test in kept.items():
        assert test in functions_in(ROOT / module)
        assert tiers.tier_of(f"{module}::{test}") == tiers.PER_CHANGE


def test_a_report_counts_minutes_by_folder_and_lists_the_slowest() -> None:
    costs = [
        Cost("e2e/tests/cluster/test_loop.py::test_a", setup=30.0, call=60.0),
        Cost("e2e/tests/cluster/test_gc.py::test_b", call=30.0, teardown=0.0),
        Cost("tests/unit/x/test_y.py::test_c", call=6.0, outcome="failed"),
        Cost("tests/model/test_z.py::test_d", call=12.0),
    ]
    assert tier_report.minutes_by_folder(costs) == {
        "e2e/tests/cluster": 2.0,
        "tests/model": 0.2,
        "tests/unit": 0.1,
    }
    assert [c.nodeid[-6:] for c in tier_report.slowest(costs, 2)] == ["test_a", "test_b"]
    lines = tier_report.summary_lines("per-change", costs, 150.0, 3 * 2**30)
    assert lines[0] == (
        "tier per-change: 2.5 min of pytest (1 failed, 3 passed); peak memory 3.00 GiB"
    )
    assert "     2.0  e2e/tests/cluster" in lines


def test_the_peak_is_read_from_this_process_memory_cgroup(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    assert tier_report.cgroup_peak_bytes(missing) is None
    no_memory = tmp_path / "cgroup"
    no_memory.write_text("3:cpuset:/\n")
    assert tier_report.cgroup_peak_bytes(no_memory) is None
