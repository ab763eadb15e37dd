"""R, the live floor's signal: what the pods ran over plain decoding at the served mix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import yaml

from specdeploy.runtime.floor import LivePlain, live_ratio
from specdeploy.runtime.profile import ProfileSpec, parse_profile
from specdeploy.runtime.ranges import k_at
from specdeploy.runtime.schedule import cost_model, derive_schedule, grid_rows, vanilla_gain
from tests.paths import ROOT

pytestmark = pytest.mark.unit

K0_TAX = 1.08
"""K=0 with speculation configured over plain decoding's step time (vLLM #49548: +7-22%)."""
RATES = (0.81, 0.69, 0.58, 0.49, 0.41)
COLLAPSED = (0.02, 0.01, 0.0, 0.0, 0.0)


def with_baseline(tax: float = K0_TAX, half_width: float | None = None) -> ProfileSpec:
    """The example profile with plain decoding measured at each size, ``tax`` below K=0."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "profile-example.yaml").read_text())
    cells = doc["spec"]["measurements"]
    doc["spec"]["baseline"] = [
        {
            "batchSize": c["batchSize"],
            "itlMs": round(c["itlMs"] / tax, 4),
            "samples": 256,
            **({} if half_width is None else {"itlHalfWidthMs": half_width * c["itlMs"] / tax}),
        }
        for c in cells
        if c["k"] == 0
    ]
    return parse_profile(doc).spec


def schedule_mix(
    schedule: Sequence[Sequence[int]], weights: dict[int, float]
) -> dict[tuple[int, int], float]:
    """The (batch size, K) mix of pods that run ``schedule`` exactly at batch-size mix
    ``weights``."""
    return {(bs, k_at(schedule, max(bs, 1))): w for bs, w in weights.items()}


def ratio(spec: ProfileSpec, rates: tuple[float, ...], **kwargs: Any) -> Any:
    """R of pods that run ``schedule`` (default: the profile's table) at batch-size mix
    ``weights`` (default: all at 4), or at an explicit (batch size, K) ``mix``."""
    schedule = kwargs.pop("schedule", derive_schedule(spec))
    weights = kwargs.pop("weights", {4: 1.0})
    inputs: dict[str, Any] = {
        "per_position": rates,
        "half_width": (0.0,) * len(rates),
        "itl_scale": None,
        "mix": schedule_mix(schedule, weights),
    }
    return live_ratio(spec, **{**inputs, **kwargs})


def test_an_all_k0_table_costs_exactly_the_k0_tax() -> None:
    """K=0 with speculation configured accepts nothing and steps slower than plain decoding:
    R is the inverse of the tax, whatever the acceptance."""
    spec = with_baseline()
    found = ratio(spec, RATES, schedule=((1, 256, 0),), weights={1: 1.0, 64: 3.0})
    assert found.ratio == pytest.approx(1 / K0_TAX, rel=2e-3)
    assert found.sizes == (1, 64)


def test_r_agrees_with_the_profiles_own_gain_at_its_acceptance_and_falls_on_collapse() -> None:
    spec = with_baseline()
    gains = vanilla_gain(spec)
    assert gains is not None
    held = ratio(spec, RATES)
    assert held.ratio == pytest.approx(float(gains[4]), rel=0.02)  # the table is best-K there
    assert held.ratio > 1.2
    collapsed = ratio(spec, COLLAPSED)
    assert collapsed.ratio < 1 / K0_TAX  # drafting K > 0 for nothing costs more than K=0


def test_the_interval_holds_r_and_widens_with_acceptance_and_cost_uncertainty() -> None:
    spec = with_baseline()
    point = ratio(spec, COLLAPSED)
    assert point.low == point.high == point.ratio  # no uncertainty given, none invented
    wide = ratio(spec, COLLAPSED, half_width=(0.1,) * 5)
    assert wide.low < wide.ratio < wide.high
    noisy = with_baseline(half_width=0.05)
    costly = ratio(noisy, COLLAPSED, half_width=(0.1,) * 5)
    assert costly.low < wide.low and costly.high > wide.high


def test_the_live_cost_scale_corrects_plain_decoding_too() -> None:
    """One scale for the whole grid moves both sides alike: R does not change."""
    spec = with_baseline()
    rows = grid_rows(spec)
    slower = ratio(spec, RATES, itl_scale=np.full(rows, 1.7))
    assert slower.ratio == pytest.approx(ratio(spec, RATES).ratio, rel=1e-6)


def test_without_a_baseline_or_a_mix_nothing_is_said() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "profile-example.yaml").read_text())
    spec = parse_profile(doc).spec
    assert not cost_model(spec).vanilla_sizes
    assert ratio(spec, RATES) is None
    assert ratio(with_baseline(), RATES, weights={}) is None


def test_r_prices_the_k_the_pods_ran_not_the_table() -> None:
    """A pod whose add-on fell to K=0 proposes nothing: its acceptance is unobserved and
    the estimate is the profile's prior, at which the table wins. R must still say what
    the pod pays, K=0's tax, because the mix says K=0 ran."""
    spec = with_baseline()
    table = ratio(spec, RATES)
    assert table.ratio > 1.2
    ran = ratio(spec, RATES, mix={(4, 0): 1.0})
    assert ran.ratio == pytest.approx(1 / K0_TAX, rel=2e-3)
    half = ratio(spec, RATES, mix={(4, 0): 1.0, (4, 3): 1.0})
    assert ran.ratio < half.ratio < ratio(spec, RATES, mix={(4, 3): 1.0}).ratio


def test_cells_neither_side_can_price_are_left_out_of_both() -> None:
    spec = with_baseline()
    priced = ratio(spec, RATES, mix={(4, 0): 1.0})
    beyond = ratio(spec, RATES, mix={(4, 0): 1.0, (4, 99): 5.0})
    assert beyond is not None and beyond.ratio == pytest.approx(priced.ratio, rel=0.05)


# --- the pods' own plain step (LivePlain) ------------------------------------------------


def timed(plain_ms: float, cells: dict[tuple[int, int], float], half: float = 0.01) -> LivePlain:
    """Live step times in bucket 2 (batch 3-4): plain decoding's and the cells'."""
    return LivePlain(
        {2: plain_ms},
        {(2, k): ms for (_, k), ms in cells.items()},
        {(2, k): half for (_, k) in cells},
    )


def test_a_k0_cell_timed_live_is_its_plain_step_over_its_step_whatever_the_profile_says() -> None:
    """The profile's K=0 tax is 8% and its half-widths 5%; the pods time K=0 at 40 ms
    and their plain step (K=0 less the drafter's pass) at 38 ms: R is 0.95, live against
    live, and its interval is the live half-width alone."""
    noisy = with_baseline(half_width=0.05)
    live = ratio(noisy, COLLAPSED, mix={(4, 0): 1.0}, timed=timed(38.0, {(4, 0): 40.0}))
    assert live.ratio == pytest.approx(0.95, abs=1e-4)
    assert live.high == pytest.approx(0.95 * 1.01, abs=1e-4)
    assert live.live_share == 1.0
    modelled = ratio(noisy, COLLAPSED, mix={(4, 0): 1.0})
    assert modelled.live_share == 0.0
    spread = (modelled.high - modelled.low) / modelled.ratio  # the profile's 5%, both ways
    assert spread > 4 * (live.high - live.low) / live.ratio


def test_a_drafting_cell_timed_live_earns_its_live_acceptance_length() -> None:
    spec = with_baseline()
    step = timed(38.0, {(4, 3): 60.0})
    held = ratio(spec, RATES, mix={(4, 3): 1.0}, timed=step)
    lengths = 1 + 0.81 + 0.81 * 0.69 + 0.81 * 0.69 * 0.58
    assert held.ratio == pytest.approx(lengths * 38.0 / 60.0, abs=1e-4)
    wide = ratio(spec, RATES, mix={(4, 3): 1.0}, timed=step, half_width=(0.1,) * 5)
    assert wide.low < held.ratio < wide.high  # acceptance's uncertainty still counts


def test_cells_outside_the_timed_buckets_keep_the_profiles_price() -> None:
    """Batch 64 has no live plain step: its half of the mix is priced as before."""
    spec = with_baseline()
    both = ratio(
        spec, COLLAPSED, mix={(4, 0): 1.0, (64, 0): 1.0}, timed=timed(40.0, {(4, 0): 40.0})
    )
    assert both.live_share == 0.5
    alone = ratio(spec, COLLAPSED, mix={(64, 0): 1.0})
    assert alone.ratio < both.ratio < 1.0  # the live half at 1.0, the profile's at 1/1.08
    missing_cell = timed(40.0, {(4, 1): 50.0})  # bucket timed, but not at the K that ran
    assert ratio(spec, COLLAPSED, mix={(4, 0): 1.0}, timed=missing_cell).live_share == 0.0
