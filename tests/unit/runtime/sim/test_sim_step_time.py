"""The simulator's cost model: roofline sanity, MoE expert loading, drafters, overheads."""

from __future__ import annotations

import numpy as np
import pytest

from specdeploy.runtime.sim.drafts import draft_model, eagle3_head, eagle_head, ngram
from specdeploy.runtime.sim.hardware import GPUS, get_gpu
from specdeploy.runtime.sim.models import (
    COMMAND_A,
    LLAMA_8B,
    MIXTRAL_8X7B,
    SEED_MOE,
    expected_distinct_experts,
)
from specdeploy.runtime.sim.presets import PRESETS, get_preset
from specdeploy.runtime.sim.roofline import Roofline
from specdeploy.runtime.sim.step_time import StepCost


def test_gpu_lookup_by_short_name_and_gfd_label() -> None:
    h100 = get_gpu("H100-SXM")
    assert get_gpu("NVIDIA-H100-80GB-HBM3") is h100
    assert h100.bandwidth == pytest.approx(3.35e12 * 0.9)
    assert h100.flops("bfloat16") == pytest.approx(989e12 * 0.8)
    assert get_gpu("A100-80GB").peak_flops("fp8") == get_gpu("A100-80GB").peak_flops("bfloat16")
    with pytest.raises(KeyError, match="known"):
        get_gpu("TPU-v5")


def test_datasheet_figures_match_the_reference_table() -> None:
    table = {
        "H100-SXM": (989, 3.35, 80),
        "H200": (989, 4.8, 141),
        "A100-80GB": (312, 2.0, 80),
        "L40S": (362, 0.864, 48),
        "B200": (2250, 8.0, 180),
        "MI300X": (1307, 5.3, 192),
    }
    assert {n: (g.bf16_tflops, g.hbm_tbps, g.memory_gb) for n, g in GPUS.items()} == table


def test_model_parameter_counts_are_those_of_the_published_shapes() -> None:
    assert 100e9 < COMMAND_A.params_total < 115e9
    assert 7.5e9 < LLAMA_8B.params_total < 8.5e9
    assert 45e9 < MIXTRAL_8X7B.params_total < 48e9
    assert 12e9 < MIXTRAL_8X7B.params_active < 14e9
    assert 380e9 < SEED_MOE.params_total < 420e9
    assert 20e9 < SEED_MOE.params_active < 40e9
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x K and V x 2 bytes.
    assert LLAMA_8B.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2


def test_expected_distinct_experts_limits() -> None:
    assert expected_distinct_experts(128, 8, 1) == pytest.approx(8.0)
    assert expected_distinct_experts(128, 8, 10_000) == pytest.approx(128.0)
    assert expected_distinct_experts(128, 8, 0) == 0.0
    counts = [expected_distinct_experts(160, 8, t) for t in (1, 2, 4, 16, 64, 256)]
    assert counts == sorted(counts)
    # Concave: doubling the tokens less than doubles the experts.
    assert counts[2] < 2 * counts[1] < 4 * counts[0]


def test_expected_distinct_experts_matches_monte_carlo_routing() -> None:
    rng = np.random.default_rng(7)
    experts, top_k, tokens, trials = 64, 4, 12, 4000
    touched = np.empty(trials)
    for i in range(trials):
        picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]
        touched[i] = np.unique(picks).size
    assert touched.mean() == pytest.approx(
        expected_distinct_experts(experts, top_k, tokens), rel=0.01
    )


def test_moe_weight_bytes_grow_with_tokens_until_every_expert_is_loaded() -> None:
    one = SEED_MOE.weight_bytes_read(1)
    four = SEED_MOE.weight_bytes_read(4)
    assert four > 2.0 * one  # at batch 1, K=3 loads ~3.5x the experts of K=0
    assert SEED_MOE.weight_bytes_read(2048) == pytest.approx(
        SEED_MOE.weight_bytes_read(4096), rel=1e-3
    )
    assert COMMAND_A.weight_bytes_read(1) == COMMAND_A.weight_bytes_read(1024)


def test_step_time_grows_with_tokens_for_every_preset() -> None:
    for preset in PRESETS.values():
        for bs in (1, 16, 256):
            times = [preset.cost.decode_itl(bs, k) for k in range(preset.max_k + 1)]
            assert times == sorted(times), preset.name
            assert preset.cost.decode_itl(bs, 0, context=2048) > times[0]


def test_dense_batch_one_is_memory_bound_so_extra_tokens_cost_little() -> None:
    roof = Roofline(get_gpu("H100-SXM"), 4)
    memory, compute = roof.dense_gemm_bounds(COMMAND_A, 1)
    assert memory > 3 * compute
    one = roof.forward(COMMAND_A, 1, 512, 512).total
    four = roof.forward(COMMAND_A, 4, 512, 4 * 512).total
    assert four < 1.05 * one


def test_dense_batch_256_is_compute_bound_so_extra_tokens_cost_almost_linearly() -> None:
    roof = Roofline(get_gpu("H100-SXM"), 4)
    memory, compute = roof.dense_gemm_bounds(COMMAND_A, 256 * 4)
    assert compute > 2 * memory
    base = roof.forward(COMMAND_A, 256, 256 * 512, 256 * 512).total
    k3 = roof.forward(COMMAND_A, 1024, 256 * 512, 1024 * 512).total
    assert k3 > 2.7 * base


def test_smooth_max_lies_between_max_and_sum() -> None:
    roof = Roofline(get_gpu("H200"))
    assert roof.smooth_max(3.0, 0.0) == 3.0
    both = roof.smooth_max(2.0, 2.0)
    assert 2.0 < both < 4.0
    assert roof.smooth_max(10.0, 1.0) == pytest.approx(10.0, rel=1e-3)


def test_tensor_parallel_adds_allreduce_but_splits_the_weights() -> None:
    h100 = get_gpu("H100-SXM")
    tp1 = Roofline(h100, 1).forward(COMMAND_A, 1, 512, 512)
    tp4 = Roofline(h100, 4).forward(COMMAND_A, 1, 512, 512)
    assert tp1.allreduce == 0.0
    assert tp4.allreduce > 0.0
    assert tp4.gemm == pytest.approx(tp1.gemm / 4, rel=0.01)


def test_breakdown_and_fast_path_agree() -> None:
    cost = get_preset("seed-moe").cost
    for kw in (
        {"decode_seqs": 37, "k": 3, "context_tokens": 20_000.0, "prefill_tokens": 500.0},
        {"decode_seqs": 1, "k": 0, "context_tokens": 100.0, "prefill_seqs": 2},
        {"decode_seqs": 200, "k": 5, "context_tokens": 90_000.0, "attention_pairs": 5e5},
    ):
        fast = cost.step_seconds(**kw)  # type: ignore[arg-type]
        assert cost.breakdown(**kw).total == pytest.approx(fast, rel=1e-12)  # type: ignore[arg-type]
        again = cost.step_seconds(**kw)  # type: ignore[arg-type]
        assert again == fast


def test_vanilla_has_no_draft_cost_and_k0_with_speculation_is_not_free() -> None:
    cost = get_preset("seed-dense").cost
    for bs in (2, 64, 189):
        vanilla = cost.breakdown(bs, 0, context_tokens=bs * 512.0, speculative=False)
        k0 = cost.breakdown(bs, 0, context_tokens=bs * 512.0)
        assert vanilla.draft == 0.0
        assert k0.draft > 0.0
        assert 1.0 < k0.total / vanilla.total < 1.3
    with pytest.raises(ValueError, match="k must be 0"):
        cost.step_seconds(4, 2, context_tokens=100.0, speculative=False)


def test_drafter_costs_scale_as_their_method_says() -> None:
    h100 = get_gpu("H100-SXM")
    roof = Roofline(h100, 1)
    head = eagle_head(LLAMA_8B, "e")
    # K sequential passes: K=4 costs about twice K=2 at batch 1.
    k2 = head.draft_seconds(roof, 1, 2, 3, 512)
    k4 = head.draft_seconds(roof, 1, 4, 5, 512)
    assert 1.7 < k4 / k2 < 2.3
    # EAGLE-3's 32k draft vocabulary makes each pass cheaper than EAGLE's 128k head.
    assert eagle3_head(LLAMA_8B, "e3").draft_seconds(roof, 64, 3, 256, 64 * 512) < (
        head.draft_seconds(roof, 64, 3, 256, 64 * 512)
    )
    # A 1B draft model costs more than a one-layer head.
    assert draft_model().draft_seconds(roof, 8, 3, 32, 8 * 512) > head.draft_seconds(
        roof, 8, 3, 32, 8 * 512
    )
    # n-gram lookup: proportional to the batch, independent of K.
    ng = ngram()
    assert ng.draft_seconds(roof, 200, 5, 1200, 0) == ng.draft_seconds(roof, 200, 1, 400, 0)
    assert ng.draft_seconds(roof, 200, 3, 800, 0) > 10 * ng.draft_seconds(roof, 10, 3, 40, 0) / 2


def test_step_cost_rejects_a_roofline_for_another_gpu() -> None:
    with pytest.raises(ValueError, match="same GPU"):
        StepCost(get_gpu("H100-SXM"), LLAMA_8B, None, 1, Roofline(get_gpu("H200"), 1))


def _goodput(preset_name: str, bs: int, k: int, *, vanilla: bool = False) -> float:
    preset = get_preset(preset_name)
    from specdeploy.runtime.goodput import acceptance_length

    al = acceptance_length(preset.acceptance.nominal(), k)
    itl = preset.cost.decode_itl(bs, k, context=preset.mean_context, speculative=not vanilla)
    return al / itl


def test_seed_dense_fixed_k3_falls_below_vanilla_at_batch_256() -> None:
    assert _goodput("seed-dense", 256, 3) < 0.95 * _goodput("seed-dense", 256, 0, vanilla=True)
    # ... while at batch 1 verifying three drafts costs little: most of AL(3) is a gain.
    from specdeploy.runtime.goodput import acceptance_length

    al3 = acceptance_length(get_preset("seed-dense").nominal_rates(), 3)
    assert _goodput("seed-dense", 1, 3) > 0.8 * al3 * _goodput("seed-dense", 1, 0, vanilla=True)


def test_seed_dense_best_k_falls_monotonically_with_batch_size() -> None:
    from specdeploy.runtime.sim.profiling import modelled_best_k

    best = modelled_best_k(get_preset("seed-dense"))
    ks = [best[bs] for bs in sorted(best)]
    assert ks == sorted(ks, reverse=True)
    assert ks[0] >= 3
    assert ks[-1] <= 1


def test_seed_moe_best_k_is_non_monotonic_in_batch_size() -> None:
    from specdeploy.runtime.sim.profiling import modelled_best_k

    best = modelled_best_k(get_preset("seed-moe"))
    mid = max(best[bs] for bs in (16, 32, 64))
    assert best[1] < mid
    assert best[256] < mid


def test_step_cost_follows_the_tokens_verified_not_k() -> None:
    cost = get_preset("llama8b-ngram-a100").cost
    ctx = 64 * 512.0
    full = cost.step_seconds(64, 4, context_tokens=ctx)
    short = cost.step_seconds(64, 4, context_tokens=ctx, verified_tokens=64 * 1.6)
    none = cost.step_seconds(64, 4, context_tokens=ctx, verified_tokens=64)
    assert none < short < full
    # A lookup drafter's own cost is per sequence: K with no proposal costs what K=1 does.
    assert none == pytest.approx(cost.step_seconds(64, 1, context_tokens=ctx, verified_tokens=64))
    with pytest.raises(ValueError, match="verified_tokens"):
        cost.step_seconds(64, 2, context_tokens=ctx, verified_tokens=64 * 4)


def test_routing_overlap_loads_fewer_experts_for_a_sequences_extra_tokens() -> None:
    from dataclasses import replace

    overlapping = replace(SEED_MOE, routing_overlap=0.38)
    # One sequence verifying 4 tokens: independent routing loads far more than overlap does.
    assert overlapping.distinct_experts(4, 1) < SEED_MOE.distinct_experts(4, 1)
    assert SEED_MOE.distinct_experts(4, 1) == pytest.approx(SEED_MOE.distinct_experts(4))
    # Tokens of distinct sequences route independently whatever the overlap.
    assert overlapping.distinct_experts(16, 16) == pytest.approx(SEED_MOE.distinct_experts(16))
    with pytest.raises(ValueError):
        replace(SEED_MOE, routing_overlap=1.0)
    roof = Roofline(get_gpu("H100-SXM"), 8)
    assert roof.forward(overlapping, 4, 512, 2048, sequences=1).gemm < (
        roof.forward(SEED_MOE, 4, 512, 2048, sequences=1).gemm
    )


def test_a_uniformly_slower_machine_scales_every_step() -> None:
    from dataclasses import replace

    preset = get_preset("seed-dense")
    slow = replace(preset, time_scale=2.0)
    for bs, k in ((1, 0), (64, 3), (256, 1)):
        assert slow.cost.decode_itl(bs, k) == pytest.approx(2.0 * preset.cost.decode_itl(bs, k))
        assert slow.cost.breakdown(bs, k, context_tokens=bs * 512.0).total == pytest.approx(
            slow.cost.decode_itl(bs, k)
        )


def test_a_machine_that_verifies_dearer_prices_only_the_draft_tokens() -> None:
    """wrong-machine: a step without drafts costs the same; what the drafts add, ~5x
    (their GEMM and logits work; the attention pairs they add are priced as before)."""
    from specdeploy.runtime.sim.scenarios import steeper_verification

    preset = get_preset("llama8b-ngram-a100")
    steep = steeper_verification(preset)
    for bs in (1, 64, 256):
        ctx = bs * 512.0
        plain = preset.cost.step_seconds(bs, 3, context_tokens=ctx, verified_tokens=bs)
        assert steep.cost.step_seconds(bs, 3, context_tokens=ctx, verified_tokens=bs) == plain
        full = preset.cost.step_seconds(bs, 3, context_tokens=ctx)
        steep_full = steep.cost.step_seconds(bs, 3, context_tokens=ctx)
        assert steep_full - plain == pytest.approx(5.0 * (full - plain), rel=0.02)
        kw = {"decode_seqs": bs, "k": 3, "context_tokens": ctx}
        assert steep.cost.breakdown(**kw).total == pytest.approx(steep_full, rel=1e-12)  # type: ignore[arg-type]


def test_the_addons_plugin_makes_a_k0_step_plain_but_for_a_drafter_with_state() -> None:
    """plain_k0: an n-gram K=0 step costs what a plain step costs (no lookup, no
    speculation overheads: bench/results/k0_anatomy.md measured at most 0.2 ms more on
    vLLM's CPU engine); an EAGLE head keeps its K=0 pass (it has state to keep)."""
    ngram_cost = get_preset("llama8b-ngram-a100").cost
    eagle_cost = get_preset("seed-dense").cost
    for bs in (1, 64, 256):
        ctx = bs * 512.0
        vanilla = ngram_cost.step_seconds(bs, 0, context_tokens=ctx, speculative=False)
        k0 = ngram_cost.breakdown(bs, 0, context_tokens=ctx)
        plugged = ngram_cost.breakdown(bs, 0, context_tokens=ctx, plain_k0=True)
        assert k0.draft > 0.0 and plugged.draft == 0.0
        assert plugged.total == pytest.approx(vanilla, rel=1e-12) and vanilla < k0.total
        assert plugged.total == pytest.approx(
            ngram_cost.step_seconds(bs, 0, context_tokens=ctx, plain_k0=True), rel=1e-12
        )
        # K >= 1 is untouched
        assert ngram_cost.step_seconds(bs, 2, context_tokens=ctx, plain_k0=True) == (
            ngram_cost.step_seconds(bs, 2, context_tokens=ctx)
        )
        eagle = eagle_cost.breakdown(bs, 0, context_tokens=ctx, plain_k0=True)
        eagle_vanilla = eagle_cost.step_seconds(bs, 0, context_tokens=ctx, speculative=False)
        assert eagle.draft == eagle_cost.breakdown(bs, 0, context_tokens=ctx).draft > 0.0
        assert eagle.total == pytest.approx(eagle_vanilla + eagle.draft, rel=1e-12)


def test_the_pass_a_pod_times_at_k0_is_the_drafters_k0_cost_for_drafters_with_state() -> None:
    """``k0_pass_seconds``: what ``vllm_addon.k0_pass`` times (EAGLE's K=0 pass); a K=0
    step less it costs a plain step with the plugin. N-gram runs no pass to time."""
    eagle_cost = get_preset("seed-dense").cost
    ngram_cost = get_preset("llama8b-ngram-a100").cost
    for bs in (1, 16, 256):
        ctx = bs * 512.0
        k0 = eagle_cost.step_seconds(bs, 0, context_tokens=ctx, plain_k0=True)
        vanilla = eagle_cost.step_seconds(bs, 0, context_tokens=ctx, speculative=False)
        timed = eagle_cost.k0_pass_seconds(bs, bs, ctx)
        assert timed > 0 and k0 - timed == pytest.approx(vanilla, rel=1e-9)
        assert ngram_cost.k0_pass_seconds(bs, bs, ctx) == 0.0
