"""The live floor's pool model and scenario targets (bench/floor_pool.py, floor_scenarios.py).

One short collapse runs the operator's own decision on a simulated pool (the
preset's exact profile, 20 s windows, 2 s restarts): the pool goes plain and
serves at plain decoding's rate, and a floor that never acts fails the same
target. The other targets are judged on hand-built windows, each with a
deliberately worse run that fails it. Modelled throughout.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.floor_pool import (
    Operator,
    Replicas,
    Traces,
    WindowRecord,
    deployment,
    flips,
    profile_document,
    run_pool,
    run_traces,
    telemetry_window,
)
from bench.floor_scenarios import (
    SCENARIOS,
    Draw,
    check_collapse,
    check_oscillate,
    check_served_256,
    exact_profile,
    most_flips_in_an_hour,
    recovery,
)
from specdeploy.operator.config import Config, FloorSettings
from specdeploy.operator.telemetry.window import StepTimes
from specdeploy.runtime.contract import bucket_label
from specdeploy.runtime.sim.presets import get_preset

pytestmark = pytest.mark.unit

COLLAPSE = SCENARIOS["collapse"].shortened(0.1)
"""Chat for 2 min, random text for 10: the operator's rule at 20 s windows and 2 s restarts."""
WINDOW_S = 20.0
QUICK = FloorSettings(restart_seconds=2.0)
NEVER = FloorSettings(restart_seconds=2.0, losing_windows=10_000)
"""A floor that never acts: a deliberately worse policy."""


@pytest.fixture(scope="module")
def collapse_traces() -> Traces:
    preset = get_preset(COLLAPSE.preset)
    return run_traces(
        preset,
        exact_profile(COLLAPSE.preset),
        COLLAPSE.acceptance(preset),
        batch_size=COLLAPSE.batch_size,
        horizon_s=COLLAPSE.horizon_s,
        seed=1,
    )


def _draw(traces: Traces, floor: FloorSettings) -> Draw:
    preset = get_preset(COLLAPSE.preset)
    body = deployment(preset, 4, WINDOW_S)
    operator = Operator(
        body, profile_document(body, exact_profile(COLLAPSE.preset)), Config(floor=floor), WINDOW_S
    )
    windows = run_pool(
        traces, operator, replicas=4, restart_seconds=floor.restart_seconds, horizon_s=720.0
    )
    return _summary(windows, COLLAPSE.judged_from_s, COLLAPSE.change_at_s)


def _summary(windows: list[WindowRecord], judged_from: float, change_at: float) -> Draw:
    judged = [w for w in windows if w.end_s > judged_from]
    times = flips(windows)
    ratio = sum(w.pool_tokens for w in judged) / sum(w.plain_tokens for w in judged)
    run = sum(w.pool_tokens for w in windows) / sum(w.plain_tokens for w in windows)
    return Draw(
        "test",
        1,
        tuple(windows),
        ratio,
        run,
        ratio,
        tuple(times),
        most_flips_in_an_hour(times),
        recovery(windows, change_at),
    )


def test_a_collapsed_pool_goes_plain_and_a_floor_that_never_acts_fails_the_target(
    collapse_traces: Traces,
) -> None:
    acted = _draw(collapse_traces, QUICK)
    states = [w.state for w in acted.windows]
    assert states[0] == "speculating" and states[-1] == "plain", states
    assert any(w.canary for w in acted.windows)
    assert acted.judged_over_plain == pytest.approx(1.0, abs=1e-9)  # every replica plain
    assert acted.recovered_after_s is not None and acted.recovered_after_s < 300
    (check,) = check_collapse([acted] * 20)
    assert check.passed, check.detail
    never = _draw(collapse_traces, NEVER)
    assert all(w.state == "speculating" for w in never.windows)
    assert 0.85 < never.judged_over_plain < 0.97  # K=0's tax, paid on every step
    (check,) = check_collapse([never] * 20)
    assert not check.passed and "never recovered" in check.detail


def test_the_telemetry_window_counts_every_speculating_pod_and_only_clean_steps(
    collapse_traces: Traces,
) -> None:
    one = telemetry_window(collapse_traces, 0.0, 60.0, pods=1.0, window_s=60.0)
    four = telemetry_window(collapse_traces, 0.0, 60.0, pods=4.0, window_s=60.0)
    assert one is not None and four is not None
    assert four.sequence_steps == pytest.approx(4 * one.sequence_steps)
    assert four.accepted[0] == pytest.approx(4 * one.accepted[0]) and one.accepted[0] > 0
    trace = collapse_traces.speculating
    in_window = int(((trace.end_time > 0) & (trace.end_time <= 60.0)).sum())
    clean = sum(t.count for t in one.step_times.values())
    assert 0 < clean < in_window  # prefill steps and K switches are not timed
    assert all(label == bucket_label(16) for label, _ in one.step_times)
    assert telemetry_window(collapse_traces, 0.0, 60.0, pods=0.0, window_s=60.0) is None


def test_the_telemetry_window_times_tokens_on_both_sides_of_a_plain_reference(
    collapse_traces: Traces,
) -> None:
    """Chat at batch 16: speculation wins, so the plain reference pod's time per output token
    is the longer; its noise is its own (another pod), and without it there is none."""
    chat = telemetry_window(collapse_traces, 0.0, 100.0, pods=2.0, window_s=100.0, reference=1.0)
    assert chat is not None and chat.tpot is not None and chat.reference_tpot is not None
    assert chat.tpot.count > 0 and chat.reference_tpot.count > 0
    ratio = chat.reference_tpot.mean_ms / chat.tpot.mean_ms
    assert 1.1 < ratio < 2.0, ratio
    alone = telemetry_window(collapse_traces, 0.0, 100.0, pods=2.0, window_s=100.0)
    assert alone is not None and alone.reference_tpot is None
    assert not np.array_equal(collapse_traces.noise[:50], collapse_traces.plain_noise[:50])


def test_the_telemetry_window_carries_the_heads_k0_pass_once_the_pods_run_k0(
    collapse_traces: Traces,
) -> None:
    """Chat: the pods draft (K > 0) and time a pass only on the policy's plain reference
    (at most 1% of steps, far fewer where K=0 loses this much); random text: K=0 steps,
    each with the EAGLE head's K=0 pass, a part of the step, as ``vllm_addon.k0_pass``
    exports it."""
    label = bucket_label(16)
    chat = telemetry_window(collapse_traces, 0.0, 100.0, pods=2.0, window_s=100.0)
    assert chat is not None
    drafting = sum(t.count for (_, k), t in chat.step_times.items() if k > 0)
    reference = chat.k0_passes.get(label, StepTimes(0.0, 0.0)).count
    assert reference <= 0.01 * drafting
    late = telemetry_window(collapse_traces, 600.0, 700.0, pods=2.0, window_s=100.0)
    assert late is not None
    steps = late.step_times[(label, 0)]
    passes = late.k0_passes[label]
    assert passes.count == steps.count > 0.9 * sum(t.count for t in late.step_times.values())
    assert 0.0 < passes.mean_ms < 0.2 * steps.mean_ms


def test_a_surged_rollout_moves_one_replica_per_restart_and_the_canary_serves_once_ready() -> None:
    pods = Replicas(total=3, restart_seconds=10.0)
    assert pods.segments(0.0, 5.0) == [(0.0, 5.0, 3, False, False)]
    pods.aim(speculating=False, canary=True, now=5.0)
    got = pods.segments(5.0, 60.0)
    assert [(a, b, n) for a, b, n, _, _ in got] == [
        (5.0, 15.0, 3),
        (15.0, 25.0, 2),
        (25.0, 35.0, 1),
        (35.0, 60.0, 0),
    ]
    assert [c for *_, c, _ in got] == [False, True, True, True]  # Ready 10 s after creation
    pods.aim(speculating=True, canary=False, now=60.0)
    assert pods.segments(60.0, 75.0) == [
        (60.0, 70.0, 0, False, False),
        (70.0, 75.0, 1, False, False),
    ]


def test_a_plain_reference_serves_once_ready_and_goes_with_the_decision() -> None:
    pods = Replicas(total=2, restart_seconds=10.0)
    pods.aim(speculating=True, canary=False, now=0.0, reference=True)
    assert pods.segments(0.0, 30.0) == [(0.0, 10.0, 2, False, False), (10.0, 30.0, 2, False, True)]
    pods.aim(speculating=True, canary=False, now=30.0, reference=False)
    assert pods.segments(30.0, 40.0) == [(30.0, 40.0, 2, False, False)]


def _windows(ratios: list[float], states: list[str] | None = None) -> list[WindowRecord]:
    states = states or ["speculating"] * len(ratios)
    return [
        WindowRecord(
            end_s=60.0 * (i + 1),
            pool_tokens=100.0 * r,
            plain_tokens=100.0,
            pool_over_plain=r,
            with_canary_over_plain=r,
            speculating_replicas=4.0,
            canary=False,
            reference=False,
            state=s,
            ratio=None,
            ratio_high=None,
            ratio_low=None,
        )
        for i, (r, s) in enumerate(zip(ratios, states, strict=True))
    ]


def test_recovery_counts_from_the_change_to_the_first_window_that_holds() -> None:
    windows = _windows([1.5, 0.93, 0.95, 1.0, 0.97, 1.0, 1.0])
    assert recovery(windows, 60.0) == 360.0 - 60.0  # the 0.97 ending at 300 s resets it
    assert recovery(_windows([1.5, 0.93, 0.93]), 60.0) is None
    assert recovery(_windows([0.98, 1.0]), math.inf) == 120.0  # no change: from the start


def test_flips_are_counted_in_any_hour_and_three_fail_the_oscillation_target() -> None:
    assert most_flips_in_an_hour([100.0, 3000.0, 3500.0, 7000.0]) == 3
    assert most_flips_in_an_hour([100.0, 3800.0, 7500.0]) == 1
    states = ["speculating", "plain", "plain", "speculating", "speculating", "plain"]
    calm = _summary(_windows([1.3] * 6), 0.0, 0.0)
    eager = _summary(_windows([1.3] * 6, states), 0.0, 0.0)
    static = {1: (1.25, "fixed:2")}
    flips, vs_static = check_oscillate([calm] * 20, static)
    assert flips.passed and vs_static.passed, (flips.detail, vs_static.detail)
    flips, _ = check_oscillate([eager] * 20, static)
    assert not flips.passed and "worst 3" in flips.detail
    stuck_plain = _summary(_windows([1.0] * 6), 0.0, 0.0)  # never speculates again
    _, vs_static = check_oscillate([stuck_plain] * 20, static)
    assert not vs_static.passed


def test_the_served_256_target_is_judged_on_the_5th_percentile() -> None:
    plain = _summary(_windows([0.98, 1.0, 1.0]), 60.0, math.inf)
    losing = _summary(_windows([0.98, 0.98, 0.98]), 60.0, math.inf)
    (check,) = check_served_256([plain] * 19 + [losing])
    assert check.passed, check.detail  # one draw in 20 is the 5th percentile's edge
    (check,) = check_served_256([plain] * 17 + [losing] * 3)
    assert not check.passed
