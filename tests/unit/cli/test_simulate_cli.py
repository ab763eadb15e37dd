"""``specdeploy simulate`` and the comparison behind it (modelled figures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specdeploy.cli import main
from specdeploy.runtime.policy.config import AdaptiveConfig
from specdeploy.runtime.sim.compare import parse_policies
from specdeploy.runtime.sim.scenarios import drift_profiles, recovery_steps

CONTRACT_KEYS = {"policy", "batch_size", "tokens_per_s", "mean_k", "k_changes_per_1000_steps"}


def _simulate(tmp_path: Path, *args: str, seeds: str = "0") -> dict[str, Any]:
    out = tmp_path / "out.json"
    argv = ["simulate", "--quiet", "--steps", "300", "--warmup-steps", "50", "--seeds", seeds]
    code = main([*argv, *args, "--json", str(out)])
    assert code == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["policy"]: r for r in doc["results"]}


def test_list_presets_names_the_seed_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list-presets"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"seed-dense", "seed-moe"} <= set(names)


def test_steady_json_has_one_record_per_policy_and_batch_size(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--batch-sizes", "1,256",
        "--policies", "vanilla,fixed:3,table,adaptive,oracle",
    )  # fmt: skip
    assert doc["preset"] == "seed-dense"
    assert doc["source"] == "modelled"
    results = doc["results"]
    assert {(r["policy"], r["batch_size"]) for r in results} == {
        (p, b) for p in ("vanilla", "fixed:3", "table", "adaptive", "oracle") for b in (1, 256)
    }
    for r in results:
        assert set(r) >= CONTRACT_KEYS
        assert r["tokens_per_s"] > 0


def test_every_record_has_its_seeds_per_seed_figures_and_their_spread(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--batch-sizes", "64", "--policies", "fixed:2,table",
        seeds="3,4,5",
    )  # fmt: skip
    assert doc["seeds"] == [3, 4, 5]
    for r in doc["results"]:
        assert r["seeds"] == [3, 4, 5]
        per_seed = [x["tokens_per_s"] for x in r["per_seed"]]
        assert [x["seed"] for x in r["per_seed"]] == [3, 4, 5]
        assert len(set(per_seed)) == 3  # each seed is its own draw
        spread = r["spread"]["tokens_per_s"]
        assert spread["min"] == pytest.approx(min(per_seed), abs=1e-3)
        assert spread["max"] == pytest.approx(max(per_seed), abs=1e-3)
        assert r["tokens_per_s"] == pytest.approx(sum(per_seed) / 3, abs=0.01)
        assert spread["sd"] > 0


def test_oracle_is_the_best_fixed_k_and_vanilla_never_speculates(tmp_path: Path) -> None:
    fixed_ks = ",".join(f"fixed:{k}" for k in range(6))
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--batch-sizes", "2,256",
        "--policies", f"vanilla,{fixed_ks},oracle",
    )  # fmt: skip
    rows = {(r["policy"], r["batch_size"]): r for r in doc["results"]}
    for bs in (2, 256):
        assert rows[("vanilla", bs)]["mean_k"] == 0
        fixed = {k: rows[(f"fixed:{k}", bs)]["tokens_per_s"] for k in range(6)}
        oracle = rows[("oracle", bs)]
        # The oracle runs its K with a table set; vLLM 0.32's V2 runner keeps full graphs
        # for EAGLE, so that costs nothing and the oracle is exactly that fixed K.
        assert oracle["oracle_k"] == max(fixed, key=lambda k: fixed[k])
        assert oracle["tokens_per_s"] == pytest.approx(fixed[oracle["oracle_k"]], rel=1e-9)
    # the trade-off exists in the model: more K wins at BS 2, loses at BS 256
    assert rows[("oracle", 2)]["oracle_k"] > rows[("oracle", 256)]["oracle_k"]


def test_table_policy_uses_the_derived_schedule(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--batch-sizes", "1,256", "--policies", "table"
    )
    schedule = doc["schedule"]
    k_at = {bs: next(k for lo, hi, k in schedule if lo <= bs <= hi) for bs in (1, 256)}
    for r in doc["results"]:
        assert r["mean_k"] == pytest.approx(k_at[r["batch_size"]], abs=0.05)


def test_drift_scenario_adaptive_lowers_k_and_table_does_not(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--scenario", "drift", "--batch-sizes", "32",
        "--policies", "table,adaptive,oracle", "--steps", "1500",
    )  # fmt: skip
    scenario = doc["scenario"]
    assert scenario["oracle_k_after"] < scenario["oracle_k_before"]
    rows = _rows(doc)
    assert rows["adaptive"]["k_after_drift"] < scenario["oracle_k_before"]
    assert rows["table"]["k_after_drift"] == scenario["oracle_k_before"]
    assert rows["adaptive"]["final_ratio_to_oracle"] > rows["table"]["final_ratio_to_oracle"]


def test_oscillation_makes_the_per_step_lookup_thrash_but_not_adaptive(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--scenario", "oscillate",
        "--policies", "table,adaptive", "--steps", "3000",
    )  # fmt: skip
    rows = _rows(doc)
    assert rows["table"]["k_changes_per_1000_steps"] > 50
    # the first choice, a few budgeted exploration steps and the plain reference's runs
    # of K=0 (two changes each)
    reference = AdaptiveConfig().reference_switches_per_1000_steps
    assert rows["adaptive"]["k_changes_per_1000_steps"] <= 2 + reference


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--preset", "no-such"], "no-such", id="unknown preset"),
        pytest.param([], "--preset", id="missing preset"),
        pytest.param(
            ["--preset", "seed-dense", "--policies", "fixed:9"], "fixed:9", id="K above maxK"
        ),
        pytest.param(
            ["--preset", "seed-dense", "--policies", "greedy"], "greedy", id="unknown policy"
        ),
        pytest.param(
            ["--preset", "seed-dense", "--batch-sizes", "1,x"], "--batch-sizes", id="not ints"
        ),
        pytest.param(["--preset", "seed-dense", "--batch-sizes", "0"], "--batch-sizes", id="zero"),
        pytest.param(
            ["--preset", "seed-dense", "--batch-sizes", "4096"], "4096", id="above max batch"
        ),
        pytest.param(["--preset", "seed-dense", "--seeds", "1,1"], "--seeds", id="seed twice"),
        pytest.param(["--preset", "seed-dense", "--seeds", "x"], "--seeds", id="seed not int"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "never.json"
    assert main(["simulate", "--quiet", "--steps", "100", *args, "--json", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_rollout_drains_the_same_requests_for_every_policy(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "llama8b-eagle3-h200", "--scenario", "rollout",
        "--policies", "vanilla,fixed:3,oracle",
    )  # fmt: skip
    rows = _rows(doc)
    assert doc["scenario"]["requests"] == 256
    for r in rows.values():
        assert r["per_seed"][0]["completed"] == 256
    # Speculation shortens the makespan; the per-step oracle is about as fast as the best
    # fixed K (a table costs nothing on the V2 runner; 1 ms per change of K).
    makespan = {p: r["spread"]["makespan_s"]["mean"] for p, r in rows.items()}
    assert makespan["fixed:3"] < 0.7 * makespan["vanilla"]
    assert makespan["oracle"] < 1.03 * makespan["fixed:3"]
    assert rows["oracle"]["k_changes_per_1000_steps"] > 0  # K follows the draining batch


def test_phased_open_loop_reports_latency_for_the_same_requests(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "llama8b-eagle3-h200", "--scenario", "phased",
        "--policies", "vanilla,table,oracle",
    )  # fmt: skip
    rows = _rows(doc)
    completed = {r["per_seed"][0]["completed"] for r in rows.values()}
    assert len(completed) == 1 and completed.pop() > 100  # drained: every policy served all
    assert len(doc["scenario"]["rates_rps"]) == 6 and doc["scenario"]["phase_s"] == 10.0
    latency = {p: r["spread"]["mean_latency_s"]["mean"] for p, r in rows.items()}
    assert latency["table"] < latency["vanilla"]


def test_collapse_reports_how_fast_k_reaches_zero(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--scenario", "collapse",
        "--policies", "fixed:0,fixed:3,table",
    )  # fmt: skip
    rows = _rows(doc)
    assert rows["fixed:0"]["per_seed"][0]["first_k0_after_steps"] == 0
    assert rows["table"]["per_seed"][0]["first_k0_after_steps"] is None  # a table never reacts
    after = {p: r["per_seed"][0]["tokens_per_s_after"] for p, r in rows.items()}
    assert after["fixed:0"] > after["fixed:3"]


def test_hardware_scenarios_serve_a_profile_made_elsewhere(tmp_path: Path) -> None:
    pessimistic = _simulate(
        tmp_path, "--preset", "seed-dense", "--scenario", "pessimistic-profile",
        "--batch-sizes", "52", "--policies", "table,oracle",
    )  # fmt: skip
    assert pessimistic["profiled_on"] == "seed-dense-half-compute"
    assert pessimistic["served_on"] == "seed-dense"
    rows = _rows(pessimistic)
    # At half the compute extra drafts look dearer: the profile's K are too low.
    assert rows["table"]["mean_k"] < rows["oracle"]["mean_k"]
    assert rows["table"]["tokens_per_s"] < rows["oracle"]["tokens_per_s"]
    slower = _simulate(
        tmp_path, "--preset", "seed-dense", "--scenario", "slower-machine",
        "--batch-sizes", "32", "--policies", "table,oracle",
    )  # fmt: skip
    assert slower["served_on"] == "seed-dense-2x-slower"
    rows = _rows(slower)
    assert rows["table"]["mean_k"] == rows["oracle"]["mean_k"]  # the ranking of K is unchanged


def test_mixed_reports_uniform_against_per_request_k(tmp_path: Path) -> None:
    doc = _simulate(
        tmp_path, "--preset", "seed-dense", "--scenario", "mixed", "--batch-sizes", "128",
        "--policies", "oracle",
    )  # fmt: skip
    rows = _rows(doc)
    assert set(rows) == {"oracle", "per-request"}
    assert rows["per-request"]["tokens_per_s"] >= rows["oracle"]["tokens_per_s"]
    assert len(doc["scenario"]["classes"]) == 2


def test_parse_policies_rejects_duplicates_and_accepts_the_contract_list() -> None:
    assert parse_policies("vanilla,fixed:3,table,adaptive,oracle", max_k=5) == [
        "vanilla", "fixed:3", "table", "adaptive", "oracle",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="twice"):
        parse_policies("table,table", max_k=5)


def test_recovery_is_the_first_window_after_which_all_windows_are_close() -> None:
    assert recovery_steps([0.9, 0.97, 0.99, 0.985, 1.0], window=100) == 200
    assert recovery_steps([0.99, 0.9, 0.99], window=100) == 200
    assert recovery_steps([0.99, 0.9], window=100) is None


def test_drift_profiles_move_the_first_position_from_08_to_05() -> None:
    before, after = drift_profiles((0.75, 0.6, 0.5))
    assert before.per_position[0] == pytest.approx(0.8)
    assert after.per_position[0] == pytest.approx(0.5)
    assert after.per_position[1] < before.per_position[1]


def test_plot_without_matplotlib_is_a_usage_error_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    code = main(["simulate", "--preset", "seed-dense", "--plot", str(tmp_path / "x.png")])
    assert code == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "specdeploy[plots]" in err
    assert not (tmp_path / "x.png").exists()


def test_the_cli_offers_exactly_the_simulators_scenarios() -> None:
    """The CLI keeps its own list so that ``--help`` does not import the simulator."""
    from specdeploy.cli import simulate
    from specdeploy.runtime.sim import scenarios

    assert simulate.SCENARIOS == scenarios.SCENARIOS
