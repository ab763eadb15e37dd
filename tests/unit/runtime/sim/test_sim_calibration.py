"""The calibration of seed-dense: reproducible, physical, and honest about what it cannot fit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.sim.acceptance import EAGLE_MT_BENCH
from specdeploy.runtime.sim.calibration import (
    SEED_TARGETS,
    evaluate,
    fit,
    memory_bound_at_batch_one,
)
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.workload import ClosedLoop

DENSE = get_preset("seed-dense")


def test_the_preset_is_the_best_admissible_setting_of_the_grid() -> None:
    best = fit(DENSE, EAGLE_MT_BENCH)[0]
    mine = evaluate(DENSE)
    assert best.setting == mine.setting
    assert mine.error == pytest.approx(best.error)
    assert len(mine.residuals) == len(SEED_TARGETS)


def test_the_fit_keeps_a_batch_one_step_memory_bound() -> None:
    fits = fit(DENSE, EAGLE_MT_BENCH)
    assert all(
        memory_bound_at_batch_one(replace(DENSE, gemm_m_half=f.setting.gemm_m_half)) for f in fits
    )
    assert not memory_bound_at_batch_one(replace(DENSE, gemm_m_half=384.0))
    assert memory_bound_at_batch_one(DENSE)


def test_no_setting_with_the_al_anchors_reproduces_both_seed_points() -> None:
    # README: the model's fixed:3/vanilla falls 20-29% from BS 128 to 256, the seed's 5%.
    anchored = [
        f for f in fit(DENSE, EAGLE_MT_BENCH) if max(abs(r) for r in f.residuals[4:]) < 0.05
    ]
    assert anchored
    for f in anchored:
        assert f.modelled[2] / f.modelled[0] < 0.85 < 0.828 / 0.874
        assert f.modelled[3] < 1.0  # DSD below vanilla at BS 256 (the seed: +1.8%)


def test_the_calibrated_figures_hold_in_the_engine() -> None:
    # fixed:3 / vanilla at BS 256 as the benchmark measures it, against the cost model's figure.
    kw = {"steps": 1200, "warmup_steps": 300, "seed": 3}
    fixed3 = DENSE.simulate(FixedPolicy(3), ClosedLoop(256), **kw)  # type: ignore[arg-type]
    vanilla = DENSE.simulate(None, ClosedLoop(256), speculative=False, **kw)  # type: ignore[arg-type]
    modelled = evaluate(DENSE).modelled[2]
    assert fixed3.tokens_per_s / vanilla.tokens_per_s == pytest.approx(modelled, rel=0.04)
