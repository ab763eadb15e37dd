"""The live floor's plain reference: one plain replica beside a speculating pool whose R
cannot tell speculation from plain decoding, and the A/B that tells them apart. Pure.

Why: R (``runtime.floor.live_ratio``) prices plain decoding by the profile
wherever the pods did not time enough K=0 steps, and at large batch sizes
they time few (the add-on's own plain reference runs on about 1% of steps).
A measured profile's plain and speculative cells carry a few percent of noise
each, so R's interval there is wider than the loss it should find: a
seed-dense pool at batch 256 serves at 0.983x plain decoding while R reads
about 1.04 [0.97, 1.11] (``make bench-floor``'s served-256, MODELLED). No
margin or pricing inside R sees through that; the pods' own clocks, side by
side under the same traffic, do.

How: after ``reference_after_windows`` undecided windows in a row (R's
interval across 1 +- margin) lasting ``reference_after_seconds`` (not a
traffic shift passing through), the pool's children get one surged replica
without ``--speculative-config`` (``builders.common.REFERENCE_LABEL``), which
the Service sends its share of the traffic. Each window in which both kinds of
pod finished ``reference_min_requests`` requests gives one ratio: the plain
replica's mean time per output token over the speculating pods' (vLLM's
``request_time_per_output_token_seconds``, what a user waits per token; with
a full batch, throughput's inverse). The A/B's R is the windows' geometric
mean with a Student's t interval over their spread: windows a minute apart
are far longer than the step-time noise's memory, so they are taken as
independent, and the spread is the one measured, not a noise model's.

It ends when the A/B shows speculation winning, when the floor rolls the
pool to plain decoding (the canary measures from then on), or after
``reference_max_seconds`` without a loss (a tie, or a pod that never served);
the next one waits as long again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specdeploy.operator.api import PoolFloor
from specdeploy.operator.config import FloorSettings, seconds_between, window_start
from specdeploy.operator.telemetry.window import PoolWindow
from specdeploy.runtime.floor import LiveRatio
from specdeploy.runtime.intervals import t_quantile

KEPT_WINDOWS = 120
"""The A/B windows status keeps (the newest): two hours of one-minute windows."""


def undecided(ratio: LiveRatio, margin: float) -> bool:
    """R's interval neither below 1 - margin (a loss) nor above 1 + margin (a win)."""
    return ratio.high >= 1.0 - margin and ratio.low <= 1.0 + margin


def window_ratio(window: PoolWindow | None, min_requests: float) -> float | None:
    """Plain decoding's time per output token over the speculating pods' in one window
    (above 1: speculation faster); None unless both sides finished ``min_requests``."""
    if window is None or window.tpot is None or window.reference_tpot is None:
        return None
    spec, plain = window.tpot, window.reference_tpot
    if spec.count < min_requests or plain.count < min_requests:
        return None
    if spec.seconds <= 0 or plain.seconds <= 0:
        return None
    return (plain.seconds / plain.count) / (spec.seconds / spec.count)


def ab_ratio(ratios: Sequence[float], sizes: tuple[int, ...], min_windows: int) -> LiveRatio | None:
    """The A/B's R: the windows' geometric mean, a t interval over their spread (None: fewer
    than ``min_windows`` windows, never fewer than 2)."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    n = len(logs)
    if n < max(min_windows, 2):
        return None
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return LiveRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), sizes)


def ended(before: PoolFloor, now: str) -> PoolFloor:
    """``before`` with no plain reference, ended at ``now`` (the undecided run starts over)."""
    return before.model_copy(
        update={
            "reference_since": None,
            "reference_ratios": (),
            "reference_ended_at": now,
            "undecided_windows": 0,
            "undecided_since": None,
        }
    )


def advance(
    settings: FloorSettings,
    before: PoolFloor,
    ratio: LiveRatio,
    window: PoolWindow | None,
    now: str,
    window_s: float,
) -> tuple[PoolFloor, LiveRatio | None]:
    """The speculating pool's reference after one more window, and the A/B's R (None: no
    reference, or too few windows yet)."""
    if before.reference_since is None:
        if undecided(ratio, settings.margin):
            # held at the threshold: an undecided pool in the hold-off writes no status
            count = min(before.undecided_windows + 1, settings.reference_after_windows)
            since = before.undecided_since or window_start(now, window_s)
        else:
            count, since = 0, None
        update: dict[str, object] = {"undecided_windows": count, "undecided_since": since}
        last = before.reference_ended_at
        held = last is not None and seconds_between(last, now) < settings.reference_max_seconds
        lasted = (
            since is not None and seconds_between(since, now) >= settings.reference_after_seconds
        )
        if count >= settings.reference_after_windows and lasted and not held:
            update |= {"reference_since": now, "reference_ratios": ()}
        return before.model_copy(update=update), None
    ratios = before.reference_ratios
    this = window_ratio(window, settings.reference_min_requests)
    if this is not None:
        ratios = (*ratios, round(this, 5))[-KEPT_WINDOWS:]
    ab = ab_ratio(ratios, ratio.sizes, settings.reference_min_windows)
    losing = ab is not None and ab.high < 1.0 - settings.reference_margin
    won = ab is not None and ab.low > 1.0 + settings.reference_margin
    expired = seconds_between(before.reference_since, now) >= settings.reference_max_seconds
    if won or (expired and not losing):
        return ended(before, now), ab
    return before.model_copy(update={"reference_ratios": ratios}), ab


__all__ = [
    "KEPT_WINDOWS",
    "ab_ratio",
    "advance",
    "ended",
    "undecided",
    "window_ratio",
]
