"""Operator-wide settings and the clocks, which no spec holds.

Its own module because every layer reads them: the reactor passes a
``Config`` and a ``Clock`` down, the decision and the pool stages read the
``Config``. Kept beside, not inside, any stage so that no stage has to
import another to learn the profiler image or Prometheus' address.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from specdeploy.operator.builders.job import DEFAULT_IMAGE
from specdeploy.operator.telemetry.settings import DEFAULT_SETTINGS, TelemetrySettings

Clock = Callable[[], str]
"""The wall clock a reconcile records in status (RFC 3339); injected so tests fix it."""


STATUS_TIME = "%Y-%m-%dT%H:%M:%SZ"
"""RFC 3339 at second precision, as Kubernetes writes times (and status records them)."""


def utc_now() -> str:
    """The wall clock as a status timestamp (``STATUS_TIME``)."""
    return datetime.datetime.now(datetime.UTC).strftime(STATUS_TIME)


def seconds_between(earlier: str | None, later: str) -> float:
    """Seconds from one status timestamp to another (0 when ``earlier`` is unset)."""
    if not earlier:
        return 0.0
    return (
        datetime.datetime.fromisoformat(later) - datetime.datetime.fromisoformat(earlier)
    ).total_seconds()


def window_start(now: str, window_s: float) -> str:
    """The status timestamp at which the window ending ``now`` began."""
    began = datetime.datetime.fromisoformat(now) - datetime.timedelta(seconds=window_s)
    return began.strftime(STATUS_TIME)


@dataclass(frozen=True)
class FloorSettings:
    """The live floor's hysteresis (``pool.live_floor``): each number says what it trades.

    A pool goes to plain decoding only on sustained, confident evidence that
    outlasts a restart's cost, and comes back on its canary's evidence (or a
    timed probe without one); oscillating traffic can cost at most
    ``max_flips_per_hour`` restarts an hour.
    """

    margin: float = 0.02
    """epsilon: R's upper bound must stay below 1 - margin (a loss beyond noise)."""
    losing_windows: int = 3
    """Consecutive telemetry windows with R's upper bound below 1 - margin before a flip."""
    winning_windows: int = 3
    """In plain decoding: the canary's windows in a row with R's lower bound above
    1 + margin before the pool speculates again."""
    restart_seconds: float = 120.0
    """What one replica's restart costs (model load to ready; minutes for large models on
    GPUs, tens of seconds on CPU). A flip pays it: the losing streak must already have
    lasted restart_seconds / loss, the dwell at which the restart pays for itself if the
    regime lasts as long again (a regime is predicted to last about as long as it has)."""
    probe_after_seconds: float = 3600.0
    """Plain decoding this long without a canary window (its pod unscheduled: no spare
    GPU), then speculate again to measure (the timed probe): with ``max_flips_per_hour``
    2 a hostile regime costs one round trip an hour at most."""
    max_flips_per_hour: int = 2
    """Flips (either way) in any hour: oscillating traffic makes at most one round trip."""
    reference_after_windows: int = 3
    """Speculating, windows in a row whose R is undecided (its interval across
    1 +- margin) before one plain reference replica is surged beside the pool
    (``pool.plain_reference``): R priced by a noisy profile can hide a loss of a
    few percent, which the pods' own latencies, side by side, do not."""
    reference_after_seconds: float = 300.0
    """The undecided windows must also span this long: R passes through the undecided
    band while traffic shifts (on the local cluster's 10 s windows, three of them after a
    shift to random text), and a reference for a transition holds a GPU for nothing."""
    reference_margin: float = 0.005
    """epsilon for the plain reference's A/B: its interval is the two kinds of pod's own
    clocks under the same traffic, so the margin asks only that a loss be worth acting on
    (the break-even does the rest)."""
    reference_min_windows: int = 5
    """Windows of A/B (each with ``reference_min_requests`` finished on both sides) before
    its interval is trusted: the interval is the windows' own spread."""
    reference_min_requests: float = 20.0
    """Requests finished in a window by each side for the window to count in the A/B."""
    reference_max_seconds: float = 3600.0
    """A plain reference that has not shown a loss after this long (or whose pod never
    served) ends, and the next waits as long again: a GPU is not held for a tie."""


DEFAULT_FLOOR = FloorSettings()


@dataclass(frozen=True)
class Config:
    """Operator-wide settings that are not part of any spec."""

    profiler_image: str = DEFAULT_IMAGE
    prometheus_url: str | None = None
    """Where telemetry is read when a spec names no Prometheus (``SPECDEPLOY_PROMETHEUS_URL``)."""
    telemetry: TelemetrySettings = DEFAULT_SETTINGS
    floor: FloorSettings = DEFAULT_FLOOR


DEFAULT_CONFIG = Config()

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_FLOOR",
    "STATUS_TIME",
    "Clock",
    "Config",
    "FloorSettings",
    "seconds_between",
    "utc_now",
    "window_start",
]
