"""The pure parts of bench/k0_step_cost.py and bench/k0_anatomy.py (the runs need vLLM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import k0_anatomy, k0_step_cost


def run(step_ms: float, k: str = "0") -> dict[str, Any]:
    return {"trace": {"step_ms_at_batch": step_ms, "steps_at_batch": 100}, "k_steps": {k: 100}}


def level(plain: list[float], vllm_k0: list[float], addon_k0: list[float]) -> dict[str, Any]:
    return {
        "concurrency": 4,
        "runs": {
            "plain": [run(x) for x in plain],
            "vllm-k0": [run(x) for x in vllm_k0],
            "addon-k0": [run(x) for x in addon_k0],
        },
    }


def test_the_target_is_met_only_when_the_intervals_upper_end_is_within_two_percent() -> None:
    plain = [50.0, 60.0, 55.0, 52.0]
    close = k0_step_cost.summarize(
        level(plain, [x * 1.08 for x in plain], [x * 1.005 for x in plain])
    )
    assert close["meets_target"]
    assert abs(close["ratio_to_plain"]["vllm-k0"]["mean"] - 1.08) < 1e-9
    assert close["steps_at_batch"] == {"plain": 400, "vllm-k0": 400, "addon-k0": 400}
    noisy = [x * f for x, f in zip(plain, (0.95, 1.06, 0.97, 1.05), strict=True)]
    unresolved = k0_step_cost.summarize(level(plain, plain, noisy))
    assert unresolved["ratio_to_plain"]["addon-k0"]["high"] > k0_step_cost.TARGET
    assert not unresolved["meets_target"]


def test_the_plugin_is_found_in_the_servers_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    marker = "specdeploy: K=0 steps skip a stateless drafter and its draft fetch"
    log.write_text(
        f"INFO x: {marker} (pid 12)\nother\nINFO y: {marker} (pid 34)\n{marker} (pid 12)\n"
    )
    assert k0_step_cost.plugin_pids(log) == ["12", "34"]
    log.write_text("no plugin here\n")
    assert k0_step_cost.plugin_pids(log) == []


def test_the_addon_server_runs_fixed_k0_with_the_plugins_switch(tmp_path: Path) -> None:
    speculative, env = k0_step_cost.server_setup("addon-k0", tmp_path)
    assert speculative is not None and speculative["num_speculative_tokens_per_batch_size"] == [
        [1, 16, 0]
    ]
    table = json.loads(Path(env["SPECDEPLOY_TABLE_FILE"]).read_text())
    assert (table["policy"], table["fixedK"]) == ("fixed", 0)
    plain, plain_env = k0_step_cost.server_setup("plain", tmp_path)
    assert plain is None and "SPECDEPLOY_TABLE_FILE" not in plain_env
    _, vllm_env = k0_step_cost.server_setup("vllm-k0", tmp_path)
    assert "SPECDEPLOY_TABLE_FILE" not in vllm_env, "vLLM's own K=0 step: no add-on, no plugin"


def test_the_anatomy_pools_every_window_of_every_run_per_batch_and_method() -> None:
    runs = {
        "plain": [{"4": [{"step": 50.0, "sampler": 1.0}, {"step": 52.0, "sampler": 1.2}]}],
        "addon-k0": [
            {"4": [{"step": 51.0, "sampler": 2.0}]},
            {"4": [{"step": 53.0, "sampler": 2.2}]},
        ],
    }
    summary = k0_anatomy.summarize(runs)
    assert summary["4"]["plain"]["step"]["n"] == 2
    assert abs(summary["4"]["addon-k0"]["sampler"]["mean"] - 2.1) < 1e-9
    assert summary["4"]["addon-k0"]["step"]["n"] == 2


def window(step: float, model: float) -> dict[str, float]:
    return {"engine_step": step, "model": model}


def test_the_anatomy_pairs_runs_and_windows_and_reads_the_extra_work_outside_the_model() -> None:
    """A forward that swings 20% between windows hides 2%; the work outside it does not."""
    plain = [[window(100.0, 90.0), window(120.0, 110.0)], [window(90.0, 80.0)]]
    k0 = [[window(121.5, 110.0), window(101.5, 90.0)], [window(92.0, 81.0)]]
    runs = {
        "plain": [{"4": rows} for rows in plain],
        "addon-k0": [{"4": rows} for rows in k0],
    }
    ratios = k0_anatomy.step_ratios(runs)["4"]["addon-k0"]
    assert ratios["whole"]["n"] == 3
    assert ratios["whole"]["verdict"] == "not resolved", "the forward's swing dominates"
    outside = ratios["outside_model"]
    expected = [1 + 1.5 / 100, 1 + 1.5 / 120, 1 + 1.0 / 90]
    assert abs(outside["mean"] - sum(expected) / 3) < 1e-12
    assert outside["high"] <= k0_step_cost.TARGET and outside["verdict"] == "met"


def test_the_anatomy_says_which_engine_changed_a_greedy_token() -> None:
    tokens = {
        "plain": [{"1": "a", "4": "b"}, {"1": "a", "4": "b"}],
        "addon-k0": [{"1": "a", "4": "b"}, {"1": "a", "4": "b"}],
        "eagle-k0": [{"1": "a", "4": "b"}, {"1": "a", "4": "x"}],
    }
    same = k0_anatomy.same_tokens(tokens)
    every_method = {name: 0.5 for name, *_ in k0_anatomy.METHODS}
    assert same["addon-k0"] == {"1": True, "4": True}
    assert same["eagle-k0"] == {"1": True, "4": False}
    result = {
        "vllm": "0.32.0",
        "cpu": "cpu",
        "repeats": 2,
        "windows": 1,
        "max_tokens": 8,
        "wall_s": 60.0,
        "summary": k0_anatomy.summarize(
            {
                engine: [{"4": [{**every_method, "engine_step": 1.0}] * 2}]
                for engine in ("plain", "eagle-k0")
            }
        ),
        "step_ratio": k0_anatomy.step_ratios(
            {
                engine: [{"4": [window(100.0, 90.0), window(101.0, 91.0)]}]
                for engine in ("plain", "eagle-k0")
            }
        ),
        "same_tokens_as_plain": same,
    }
    text = k0_anatomy.markdown(result)
    assert "**differ from plain decoding's**: eagle-k0 at batch 4." in text
    assert "| 4 | eagle-k0 | 1.000 [1.000, 1.000] met | 1.000 [1.000, 1.000] met |" in text
