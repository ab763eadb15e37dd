"""Which simulator preset a served model and method map to, and on which GPU."""

from __future__ import annotations

import pytest

from e2e.emulated.catalog import (
    DEFAULT_PRESET,
    FAMILIES,
    emulated_preset,
    on_gpu,
    preset_for,
    resolve,
)
from specdeploy.runtime.sim.presets import PRESETS, get_preset, list_presets

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_model_and_method_resolve_exactly(name: str) -> None:
    preset = PRESETS[name]
    twins = sorted(
        n
        for n, p in PRESETS.items()
        if (p.model.name, p.drafter.method) == (preset.model.name, preset.drafter.method)
    )
    assert resolve(preset.model.name, preset.drafter.method) == (twins[0], "exact")


def test_twins_on_other_gpus_resolve_to_the_first_by_name() -> None:
    assert preset_for(LLAMA_8B, "eagle3") == "llama8b-eagle3-h200"  # not -l40s


@pytest.mark.parametrize(
    ("model", "method", "preset", "rule"),
    [
        pytest.param(LLAMA_8B.upper(), "eagle3", "llama8b-eagle3-h200", "exact", id="case"),
        pytest.param(LLAMA_8B, "mtp", "llama8b-eagle3-h200", "same model and family", id="mtp"),
        pytest.param("org/unknown-7b", "ngram", "llama8b-ngram-a100", "same method", id="ngram"),
        pytest.param("org/unknown-7b", "suffix", "llama8b-ngram-a100", "same method", id="sfx"),
        pytest.param(
            "org/unknown-7b", "draft_model", "llama70b-draft-a100", "same method", id="draft"
        ),
        pytest.param("org/unknown-7b", "custom_class", DEFAULT_PRESET, "default", id="default"),
    ],
)
def test_resolution_order(model: str, method: str, preset: str, rule: str) -> None:
    assert resolve(model, method) == (preset, rule)
    assert preset_for(model, method) == preset


@pytest.mark.parametrize("method", sorted(FAMILIES))
def test_every_method_resolves_to_a_preset_that_drafts_the_same_way(method: str) -> None:
    preset = get_preset(preset_for("org/unknown", method))
    assert FAMILIES[preset.drafter.method] == FAMILIES[method]


def test_on_gpu_swaps_the_gpu_and_reprices_steps() -> None:
    base = get_preset("llama8b-eagle3-h200")
    moved = on_gpu(base, "NVIDIA-L40S")
    assert moved.gpu.product == "NVIDIA-L40S"
    assert (moved.model, moved.drafter, moved.tp) == (base.model, base.drafter, base.tp)
    slow = moved.cost.decode_itl(32, 3)
    fast = base.cost.decode_itl(32, 3)
    assert slow > 2 * fast  # 0.86 TB/s against 4.8: a memory-bound step is far slower
    assert on_gpu(base, None) is base


def test_an_unknown_gpu_is_an_error_listing_the_known_ones() -> None:
    with pytest.raises(KeyError, match="H100-SXM"):
        on_gpu(get_preset(DEFAULT_PRESET), "NVIDIA-T4")


def test_emulated_preset_honours_the_override_and_plain_vllm() -> None:
    preset, match = emulated_preset(LLAMA_8B, "eagle3", "NVIDIA-H100-80GB-HBM3", "seed-moe")
    assert preset.name == "seed-moe" and match.rule == "SPECDEPLOY_EMULATED_PRESET"
    assert preset.gpu.product == "NVIDIA-H100-80GB-HBM3"
    plain, match = emulated_preset(LLAMA_8B, None, None)
    assert plain.model.name == LLAMA_8B and match.rule == "same model (no speculation)"
    unknown, match = emulated_preset("org/x", None, None)
    assert unknown.name == DEFAULT_PRESET and match.rule == "default"
