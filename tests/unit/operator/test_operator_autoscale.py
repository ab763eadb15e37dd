"""Replicas from demand over table-predicted capacity, within bounds and GPUs, without flapping."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from specdeploy.operator.pool.autoscale import (
    Bounds,
    Demand,
    ScaleState,
    Why,
    recommend,
    stabilize,
)

pytestmark = pytest.mark.unit

BOUNDS = Bounds(min=1, max=6)


def test_replicas_are_demand_over_capacity_less_headroom() -> None:
    # 1,000 tokens/s at 400 tokens/s per replica planned at 80%: 1000 / 320 -> 4.
    rec = recommend(Demand(1000.0), 400.0, current=1, bounds=BOUNDS, headroom=0.2)

    assert (rec.replicas, rec.wanted, rec.why) == (4, 4, Why.DEMAND)


def test_the_queue_counts_as_tokens_to_drain_within_the_window() -> None:
    # 300 tokens/s served plus 40 waiting x 150 tokens over 30 s = 500 tokens/s -> 2 at 250.
    demand = Demand(300.0, waiting_requests=40, tokens_per_request=150)

    assert demand.tokens_per_second(30.0) == pytest.approx(500.0)
    assert recommend(demand, 250.0, current=1, bounds=BOUNDS, headroom=0.0).replicas == 2


def test_the_bounds_clamp_and_say_so() -> None:
    assert recommend(Demand(0.0), 400.0, current=3, bounds=BOUNDS).why is Why.MIN
    assert recommend(Demand(0.0), 400.0, current=3, bounds=BOUNDS).replicas == 1
    high = recommend(Demand(10_000.0), 400.0, current=3, bounds=BOUNDS)
    assert (high.replicas, high.why) == (6, Why.MAX)
    assert high.wanted > 6


def test_a_pool_grows_only_onto_free_gpus_of_its_type() -> None:
    # 2 replicas running with 2 GPUs each, 3 GPUs free: room for one more, not four.
    bounds = Bounds(min=1, max=6, gpus_per_replica=2, free_gpus=3)
    rec = recommend(Demand(10_000.0), 400.0, current=2, bounds=bounds)

    assert (rec.replicas, rec.why) == (3, Why.GPUS)


def test_no_free_gpus_never_sheds_running_replicas() -> None:
    bounds = Bounds(min=1, max=6, free_gpus=0)

    assert recommend(Demand(10_000.0), 400.0, current=4, bounds=bounds).replicas == 4


def test_an_unattainable_latency_target_holds_the_pool() -> None:
    rec = recommend(Demand(10_000.0), None, current=2, bounds=BOUNDS)

    assert (rec.replicas, rec.why) == (2, Why.UNATTAINABLE)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="min <= max"):
        Bounds(min=3, max=2)
    with pytest.raises(ValueError, match="headroom"):
        recommend(Demand(1.0), 1.0, current=1, bounds=BOUNDS, headroom=1.0)
    with pytest.raises(ValueError, match="drain_s"):
        Demand(1.0).tokens_per_second(0)


def run(recommendations: Sequence[tuple[float, int]], **windows: float) -> ScaleState:
    start, first = recommendations[0]
    state = ScaleState(replicas=first, recent=((start, first),))
    for now, n in recommendations[1:]:
        state = stabilize(state, now, n, **windows)
    return state


def test_scale_up_is_immediate_and_scale_down_waits_for_the_whole_window() -> None:
    state = run([(0, 2), (10, 5)], down_window_s=60)
    assert state.replicas == 5

    # Demand falls at t=20; the window still holds 5 until t=70, and the pool with it.
    state = stabilize(state, 20, 2, down_window_s=60)
    state = stabilize(state, 69, 2, down_window_s=60)
    assert state.replicas == 5
    state = stabilize(state, 71, 2, down_window_s=60)
    assert state.replicas == 2


def test_a_short_dip_never_shrinks_the_pool() -> None:
    state = run([(0, 4), (30, 1), (40, 4), (90, 4)], down_window_s=60)

    assert state.replicas == 4
    assert state.changes == ()


def test_an_oscillating_load_changes_direction_at_most_once_per_window() -> None:
    # Demand alternates 2 <-> 6 every 40 s for 20 min, with a 120 s down window.
    window = 120.0
    state = ScaleState(replicas=2)
    directions: list[tuple[float, int]] = []
    for step in range(1, 31):
        now = step * 40.0
        before = state.direction
        state = stabilize(state, now, 6 if step % 2 else 2, down_window_s=window)
        if state.direction != before:
            directions.append((now, state.direction))

    times = [t for t, _ in directions]
    assert all(b - a >= window for a, b in itertools.pairwise(times))
    assert state.replicas == 6  # held at the higher count


def test_the_up_window_takes_the_lowest_recent_recommendation() -> None:
    # With a 30 s up window a spike to 8 does not scale to 8; demand that stays at 3 does.
    state = run([(0, 2), (10, 3), (20, 8)], up_window_s=30, down_window_s=60)
    assert state.replicas == 2

    state = stabilize(state, 45, 3, up_window_s=30, down_window_s=60)
    assert state.replicas == 3


def test_a_reversal_right_after_a_scale_down_waits_for_the_window() -> None:
    # Up to 6 at t=10, low from t=20: down to 2 once 6 left the 120 s window (t=130).
    state = run([(0, 2), (10, 6)] + [(t, 2) for t in range(20, 141, 10)], down_window_s=120)
    assert state.replicas == 2 and state.reversed_at == 130

    # Demand jumps back at t=150: reversing again before t=250 would flap; it waits.
    state = stabilize(state, 150, 6, down_window_s=120)
    state = stabilize(state, 249, 6, down_window_s=120)
    assert state.replicas == 2
    state = stabilize(state, 251, 6, down_window_s=120)
    assert state.replicas == 6
    assert state.changes == (10, 130, 251)
