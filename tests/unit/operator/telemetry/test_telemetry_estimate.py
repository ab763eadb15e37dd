"""The merge math: reached-position acceptance, drafting rate, confidence, cost ratios, drift."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from specdeploy.operator.telemetry.drift import CostStreak, acceptance_drifted, next_streak
from specdeploy.operator.telemetry.estimate import (
    batch_weights,
    cell_ratios,
    estimate_acceptance,
    live_plain,
    mean_half_width,
    pooled_ratio,
    served_mix,
)
from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.operator.telemetry.window import PoolWindow, StepTimes
from specdeploy.runtime.schedule import cost_model
from tests.unit.operator.telemetry.fakes import PROFILE_RATES, body, profile_spec, window

S = TelemetrySettings()


def counts(
    reached: tuple[float, ...], proposed: tuple[float, ...], accepted: tuple[float, ...]
) -> PoolWindow:
    return PoolWindow(60.0, reached=reached, proposed=proposed, accepted=accepted)


def test_acceptance_divides_by_reached_positions_so_a_missing_draft_is_a_rejection() -> None:
    # 10 000 sequences reached position 1, only 5 000 had a draft there, 4 000 accepted it
    w = counts((10_000, 4_000), (5_000, 4_000), (4_000, 2_000))
    est = estimate_acceptance(w, prior=(0.8, 0.5), settings=TelemetrySettings(prior_weight=0))
    assert est.per_position == pytest.approx((0.4, 0.5))
    assert est.drafting_rate == pytest.approx((0.5, 1.0))


def test_the_prior_holds_a_position_rarely_reached_and_yields_to_a_busy_one() -> None:
    w = counts((100_000, 10), (100_000, 10), (30_000, 10))
    est = estimate_acceptance(w, prior=(0.8, 0.5), settings=TelemetrySettings(prior_weight=200))
    assert est.per_position[0] == pytest.approx(0.3, abs=0.002)
    assert est.per_position[1] == pytest.approx((10 + 200 * 0.5) / 210)


def test_counts_that_break_accepted_le_proposed_le_reached_are_clipped() -> None:
    w = counts((100, 50), (120, 60), (130, 70))  # Prometheus' extrapolation, half a step
    est = estimate_acceptance(w, prior=(0.5, 0.5), settings=S)
    assert est.accepted == (100.0, 50.0)
    assert est.proposed == (100.0, 50.0)


@pytest.mark.parametrize(
    ("sequences", "confident"),
    [pytest.param(100, False, id="a-trickle"), pytest.param(50_000, True, id="busy")],
)
def test_confidence_needs_enough_reached_positions(sequences: float, confident: bool) -> None:
    est = estimate_acceptance(window(sequences=sequences), prior=PROFILE_RATES, settings=S)
    assert est.confident is confident


def test_the_interval_narrows_as_counts_grow() -> None:
    small = estimate_acceptance(window(sequences=2_000), PROFILE_RATES, S).half_width[0]
    large = estimate_acceptance(window(sequences=200_000), PROFILE_RATES, S).half_width[0]
    assert large < small / 5


def test_live_step_times_are_compared_with_the_profile_at_the_bucket_middle() -> None:
    spec = profile_spec(body())
    model = cost_model(spec)
    for factor in (1.0, 1.3):
        w = window(k=3, bucket="5-8", bs=6.5, cost_factor=factor)
        (ratio,) = cell_ratios(w.step_times, model, max_batch_size=256)
        assert (ratio.bucket, ratio.k) == (3, 3)
        assert ratio.ratio == pytest.approx(factor)
        pooled, steps = pooled_ratio([ratio], S.cost_min_steps)
        assert pooled == pytest.approx(factor)
        assert steps == 5000
    few = cell_ratios(window(steps=10).step_times, model, max_batch_size=256)
    assert pooled_ratio(few, S.cost_min_steps) == (None, 0.0)


def test_where_the_pods_export_batch_sizes_a_cell_is_priced_at_its_mean_not_the_middle() -> None:
    """Steps at batch 256 priced at the 129-256 bucket's middle read as a slower machine."""
    model = cost_model(profile_spec(body()))
    w = window(k=3, bucket="129-256", bs=256.0)
    sized = {("129-256", 3): 256.0 * 5000}
    (at_mean,) = cell_ratios(w.step_times, model, max_batch_size=256, batch_sizes=sized)
    assert at_mean.ratio == pytest.approx(1.0)
    (at_middle,) = cell_ratios(w.step_times, model, max_batch_size=256)
    assert at_middle.ratio > 1.02


def test_the_batch_distribution_spreads_each_buckets_steps_over_its_sizes() -> None:
    weights = batch_weights(window(bucket="3-4", steps=100), rows=257)
    assert weights == {3: 50.0, 4: 50.0}


def test_a_cells_steps_go_to_their_mean_batch_size_where_the_pods_export_it() -> None:
    """A pool at batch 256 is priced at 256, not over 129-256 (R read ~5% high spread)."""
    at_256 = window(bucket="129-256", steps=100)
    sized = replace(at_256, step_batch_sizes={("129-256", 5): 100 * 256.0})
    assert served_mix(sized, rows=257) == {(256, 5): 100.0}
    # between two sizes: split so that the mean holds (3.25: 3/4 at 3, 1/4 at 4)
    between = replace(window(bucket="3-4", steps=100), step_batch_sizes={("3-4", 5): 325.0})
    mix = served_mix(between, rows=257)
    assert mix == pytest.approx({(3, 5): 75.0, (4, 5): 25.0})
    assert sum(bs * n for (bs, _), n in mix.items()) / 100 == pytest.approx(3.25)
    # a mean outside the bucket (counters extrapolated apart) is held to the bucket's sizes
    outside = replace(window(bucket="3-4", steps=100), step_batch_sizes={("3-4", 5): 900.0})
    assert served_mix(outside, rows=257) == {(4, 5): 100.0}
    # spread where no sizes came back (a pod that predates the series)
    assert served_mix(at_256, rows=257) == {(bs, 5): 100 / 128 for bs in range(129, 257)}


def test_the_served_mix_keeps_the_k_each_step_ran() -> None:
    """R prices what ran: the K of each (bucket, K) cell stays beside its batch sizes."""
    w = window(bucket="3-4", steps=100)
    both = PoolWindow(
        window_seconds=60.0,
        step_times={**w.step_times, ("2", 0): StepTimes(3.0, 30.0), ("junk", 2): StepTimes(1, 1)},
    )
    assert served_mix(both, rows=257) == {(3, 5): 50.0, (4, 5): 50.0, (2, 0): 30.0}
    assert batch_weights(both, rows=257) == {3: 50.0, 4: 50.0, 2: 30.0}
    assert served_mix(PoolWindow(window_seconds=60.0), rows=257) == {}


def test_cost_drift_needs_consecutive_drifting_intervals_and_a_blip_resets_it() -> None:
    streak = CostStreak()
    for ratio in (1.3, 1.3, 1.0, 1.3, 1.3):
        streak = next_streak(streak, ratio, S)
    assert streak == CostStreak(2, False)
    streak = next_streak(streak, None, S)  # too few steps: says nothing
    assert streak == CostStreak(2, False)
    streak = next_streak(streak, 0.7, S)  # faster counts too: another clock, another driver
    assert streak == CostStreak(3, True)
    assert next_streak(streak, 1.0, S).sustained  # sticky until the profile changes


def test_acceptance_drift_is_a_confident_move_beyond_tolerance_and_interval() -> None:
    low = estimate_acceptance(window((0.5, 0.4, 0.3, 0.2, 0.1)), PROFILE_RATES, S)
    same = estimate_acceptance(window((0.8, 0.7, 0.58, 0.49, 0.41)), PROFILE_RATES, S)
    trickle = estimate_acceptance(window((0.5, 0.4, 0.3, 0.2, 0.1), sequences=50), PROFILE_RATES, S)
    assert acceptance_drifted(low, PROFILE_RATES, S)
    assert not acceptance_drifted(same, PROFILE_RATES, S)
    assert not acceptance_drifted(trickle, PROFILE_RATES, S)


# --- plain decoding's live step (live_plain) ----------------------------------------------


def steps(
    cells: dict[tuple[str, int], tuple[float, float]], **passes: tuple[float, float]
) -> PoolWindow:
    """A window with clean steps per (bucket, K): (mean ms, count); passes per bucket
    (keyword ``b9_16`` for "9-16"): (mean ms, count)."""
    return PoolWindow(
        window_seconds=60,
        step_times={c: StepTimes(ms * n / 1000.0, n) for c, (ms, n) in cells.items()},
        k0_passes={
            b.removeprefix("b").replace("_", "-"): StepTimes(ms * n / 1000.0, n)
            for b, (ms, n) in passes.items()
        },
    )


def test_an_eagle_pods_plain_step_is_its_k0_step_less_the_timed_pass() -> None:
    settings = TelemetrySettings()
    window = steps({("9-16", 0): (40.0, 4000), ("9-16", 2): (55.0, 1000)}, b9_16=(2.0, 4000))
    timed = live_plain(window, "eagle", settings)
    assert timed is not None
    assert timed.plain_ms == {4: pytest.approx(38.0)}
    assert timed.cell_ms == {(4, 0): pytest.approx(40.0), (4, 2): pytest.approx(55.0)}
    remainder = settings.live_plain_remainder_ms / 38.0
    assert timed.half_width[(4, 0)] == pytest.approx(remainder), "K=0: the same steps"
    sampling = math.hypot(mean_half_width(4000, settings), mean_half_width(1000, settings))
    assert timed.half_width[(4, 2)] == pytest.approx(remainder + sampling)


def test_without_its_pass_timed_an_eagle_bucket_has_no_live_plain_step() -> None:
    """A pod that does not time its pass (an older add-on) gives none; a pass count far
    from the step count means the two were not counted on the same steps."""
    settings = TelemetrySettings()
    assert live_plain(steps({("9-16", 0): (40.0, 4000)}), "eagle", settings) is None
    mismatched = steps({("9-16", 0): (40.0, 4000)}, b9_16=(2.0, 900))
    assert live_plain(mismatched, "eagle3", settings) is None


def test_an_ngram_k0_step_is_a_plain_step_and_other_methods_say_nothing() -> None:
    settings = TelemetrySettings()
    window = steps({("1", 0): (30.0, 500), ("3-4", 0): (31.0, 50)})
    timed = live_plain(window, "ngram", settings)
    assert timed is not None and timed.plain_ms == {0: pytest.approx(30.0)}, "50 steps: too few"
    assert live_plain(window, "mtp", settings) is None
    assert live_plain(window, "suffix", settings) is None


def test_the_sampling_error_shrinks_with_steps_and_grows_with_their_correlation() -> None:
    settings = TelemetrySettings()
    assert mean_half_width(4000, settings) < mean_half_width(400, settings)
    independent = TelemetrySettings(step_rho=0.0)
    assert mean_half_width(400, independent) == pytest.approx(1.96 * 0.16 / 20.0)
    assert mean_half_width(400, settings) > mean_half_width(400, independent)
