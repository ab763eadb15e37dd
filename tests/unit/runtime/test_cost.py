"""The step-cost model: exact at measured cells, known parameters recovered, corrections priced."""

from __future__ import annotations

import numpy as np
import pytest

from specdeploy.runtime.cost import Cell, StepCostModel

# The truth: ITL = 4 + 0.03 bs + 0.05 T + 0.001 C + 2.0 [K > 0]   (ms)
ALPHA, PER_BS, BETA, GAMMA, DRAFTER = 4.0, 0.03, 0.05, 0.001, 2.0
SIZES, KS, CONTEXTS = (1, 8, 32, 128), (0, 1, 2, 3), (200.0, 800.0, 2000.0)


def true_itl(bs: int, k: int, verified_per_seq: float, context_per_seq: float) -> float:
    return (
        ALPHA + PER_BS * bs + BETA * bs * verified_per_seq + GAMMA * bs * context_per_seq
        + (DRAFTER if k else 0.0)
    )  # fmt: skip


def cells(contexts: tuple[float, ...] = CONTEXTS, proposal: float = 1.0) -> list[Cell]:
    out = []
    for bs in SIZES:
        for k in KS:
            for c in contexts:
                v = 1.0 + proposal * k
                out.append(Cell(bs, k, true_itl(bs, k, v, c), v, c))
    return out


def test_gamma_and_the_per_token_slope_are_recovered_from_a_context_axis() -> None:
    model = StepCostModel.fit(cells())
    assert model.gamma == pytest.approx(GAMMA, rel=1e-6)
    for bs in SIZES:
        assert model.beta_at(bs) == pytest.approx(BETA, rel=1e-6)


def test_the_model_is_exact_at_every_measured_cell() -> None:
    model = StepCostModel.fit(cells())
    for c in cells():
        predicted = model.itl_ms(c.batch_size, c.k, c.batch_size * c.verified_per_sequence,
                                 c.batch_size * c.context_per_sequence)  # fmt: skip
        assert predicted == pytest.approx(c.itl_ms, rel=1e-9)


def test_shorter_proposals_cost_the_per_token_slope_less_but_keep_the_drafters_pass() -> None:
    model = StepCostModel.fit(cells())  # profiled with full proposals
    bs, k, ctx = 32, 3, 800.0
    short = 1.0 + 0.25 * k  # an n-gram drafter proposing a quarter of the time
    predicted = model.itl_ms(bs, k, bs * short, bs * ctx)
    assert predicted == pytest.approx(true_itl(bs, k, short, ctx), rel=1e-6)
    assert predicted > model.itl_ms(bs, 0, bs, bs * ctx) + DRAFTER * 0.99  # the pass stays


def test_without_a_context_axis_gamma_is_zero_and_the_context_is_in_the_cells() -> None:
    model = StepCostModel.fit(cells(contexts=(500.0,)))
    assert model.gamma == 0.0
    assert model.reference_context == 500.0
    assert model.itl_ms(8, 2, 8 * 3, 8 * 500) == pytest.approx(true_itl(8, 2, 3, 500), rel=1e-9)


def test_between_measured_sizes_the_cost_is_interpolated_and_beyond_them_held() -> None:
    model = StepCostModel.fit(cells())
    ref = model.reference_context
    mid = model.itl_ms(20, 1, 20 * 2, 20 * ref)
    assert model.itl_ms(8, 1, 8 * 2, 8 * ref) < mid < model.itl_ms(32, 1, 32 * 2, 32 * ref)
    grid = model.grid(256, 3)
    assert np.isnan(grid[0]).all()
    assert grid[256, 2] == pytest.approx(grid[128, 2])
    assert grid[5, 1] == pytest.approx(model.itl_ms(5, 1, 5 * 2, 5 * ref))


def test_the_plain_decoding_baseline_is_priced_with_the_context_shift() -> None:
    vanilla = [(bs, 0.9 * true_itl(bs, 0, 1.0, 1000.0)) for bs in SIZES]
    model = StepCostModel.fit(cells(), vanilla)
    assert model.reference_context == pytest.approx(1000.0)  # the cells' mean context
    at_reference = model.vanilla_itl_ms(8, 1000.0)
    assert at_reference is not None
    assert at_reference == pytest.approx(0.9 * true_itl(8, 0, 1.0, 1000.0))
    assert model.vanilla_itl_ms(8, 2000.0) == pytest.approx(at_reference + GAMMA * 8 * 1000.0)
    assert StepCostModel.fit(cells()).vanilla_itl_ms(8, 100.0) is None
