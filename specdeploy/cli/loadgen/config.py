"""What one load run is asked to do, with defaults that finish and caps that hold.

A load generator left running, or turned up by a typo, is an incident: every
knob has a default that ends on its own (``--max-requests``,
``--max-tokens``, ``--timeout``) and a hard cap that no flag can lift. The
checks are a chain of small named predicates; the first violation is the
error, worded for the CLI (it names the flag).

A run's shape is either ``concurrency`` for ``duration_s`` or a ``ramp`` of
stages (``ramp.py``); with a ramp, ``concurrency`` becomes its peak (the
workers and connections the run holds) and ``duration_s`` the sum of its
stages, filled in on creation, so every bound below holds for both shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specdeploy.cli.loadgen.ramp import Stage, format_ramp, peak, total_s

WORKLOADS = ("chat", "code", "random")
APIS = ("chat", "completions")

MAX_CONCURRENCY = 1024
MAX_DURATION_S = 3600.0
MAX_REQUESTS_CAP = 100_000
"""Also bounds memory and the JSON: one row is kept per request."""
MAX_TOKENS_CAP = 32_768
MAX_TIMEOUT_S = 600.0
MAX_BACKOFF_S = 60.0
MIN_BUCKET_S = 0.01
MAX_BUCKET_S = 600.0
MAX_TIMELINE_BUCKETS = 50_000
"""Rows of the timeline at most: (duration + timeout) / bucket, the longest a run lasts."""

DEFAULT_WORKLOAD = "chat"
DEFAULT_API = "chat"
DEFAULT_MAX_REQUESTS = 10_000
DEFAULT_MAX_TOKENS = 128
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_SEED = 0
DEFAULT_BACKOFF_S = 0.1
"""A refused worker's pause: a closed loop against a closed port would otherwise spin."""
DEFAULT_BUCKET_S = 1.0


class UsageError(ValueError):
    """Invalid input: the CLI prints the message and exits with code 2."""


@dataclass(frozen=True)
class LoadConfig:
    """One run: where, what, how hard and for how long (validated on creation)."""

    url: str
    """The server's base URL (``http://127.0.0.1:8000``); ``--api`` picks the endpoint."""
    model: str
    concurrency: int = 0
    """Workers; with a ``ramp``, left 0 (or its peak) and set to the peak."""
    duration_s: float = 0.0
    """Seconds during which requests start; with a ``ramp``, its total."""
    workload: str = DEFAULT_WORKLOAD
    api: str = DEFAULT_API
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    ignore_eos: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    seed: int = DEFAULT_SEED
    ramp: tuple[Stage, ...] = ()
    """Stages run back to back (``--ramp``); empty: ``concurrency`` for ``duration_s``."""
    backoff_s: float = DEFAULT_BACKOFF_S
    """How long a worker waits after a retriable refusal before its next request."""
    timeline_bucket_s: float = DEFAULT_BUCKET_S
    """The width of one timeline row (``report``'s ``timeline``)."""

    def __post_init__(self) -> None:
        if self.ramp:
            problem = ramp_problem(self)
            if problem is not None:
                raise UsageError(problem)
            object.__setattr__(self, "ramp", tuple(self.ramp))  # frozen: derived once, here
            object.__setattr__(self, "concurrency", peak(self.ramp))
            object.__setattr__(self, "duration_s", total_s(self.ramp))
        for problem in problems(self):
            raise UsageError(problem)

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The run as stages: the ramp, or one stage of ``concurrency`` for ``duration_s``."""
        return self.ramp or (Stage(self.duration_s, self.concurrency),)


def ramp_problem(c: LoadConfig) -> str | None:
    """What is wrong with a ramp before its peak and total stand in for the flags."""
    if c.concurrency not in (0, peak(c.ramp)) or c.duration_s not in (0, total_s(c.ramp)):
        return "--ramp replaces --concurrency and --duration: give one or the other"
    for number, stage in enumerate(c.ramp, start=1):
        if not 0 < stage.duration_s <= MAX_DURATION_S or stage.duration_s != stage.duration_s:
            return f"--ramp: stage {number} must last > 0 and <= {MAX_DURATION_S:g} s"
        if not 0 <= stage.concurrency <= MAX_CONCURRENCY:
            return f"--ramp: stage {number} must ask for 0 to {MAX_CONCURRENCY} workers"
    if peak(c.ramp) < 1:
        return f"--ramp: no stage asks for a worker ({format_ramp(c.ramp)})"
    if total_s(c.ramp) > MAX_DURATION_S:
        return f"--ramp: the stages last {total_s(c.ramp):g} s, more than {MAX_DURATION_S:g} s"
    return None


def problems(config: LoadConfig) -> Iterator[str]:
    """Every violation of the bounds, in the order the flags are documented."""
    for check in CHECKS:
        problem = check(config)
        if problem is not None:
            yield problem


def _between(flag: str, value: float, low: float, high: float, *, low_open: bool) -> str | None:
    too_low = value <= low if low_open else value < low
    if too_low or value > high or value != value:  # value != value: NaN
        lower = f"> {low:g}" if low_open else f">= {low:g}"
        return f"{flag} must be {lower} and <= {high:g} (got {value:g})"
    return None


def shape_is_given(c: LoadConfig) -> str | None:
    if c.ramp or c.concurrency or c.duration_s:
        return None
    return "give --concurrency and --duration, or --ramp"


def model_is_named(c: LoadConfig) -> str | None:
    return None if c.model.strip() else "--model: the served model name must not be empty"


def concurrency_is_capped(c: LoadConfig) -> str | None:
    return _between("--concurrency", c.concurrency, 1, MAX_CONCURRENCY, low_open=False)


def duration_is_capped(c: LoadConfig) -> str | None:
    return _between("--duration", c.duration_s, 0, MAX_DURATION_S, low_open=True)


def max_requests_is_capped(c: LoadConfig) -> str | None:
    return _between("--max-requests", c.max_requests, 1, MAX_REQUESTS_CAP, low_open=False)


def max_tokens_is_capped(c: LoadConfig) -> str | None:
    return _between("--max-tokens", c.max_tokens, 1, MAX_TOKENS_CAP, low_open=False)


def timeout_is_capped(c: LoadConfig) -> str | None:
    return _between("--timeout", c.timeout_s, 0, MAX_TIMEOUT_S, low_open=True)


def workload_is_known(c: LoadConfig) -> str | None:
    if c.workload in WORKLOADS:
        return None
    return f"--workload must be one of {', '.join(WORKLOADS)} (got {c.workload!r})"


def api_is_known(c: LoadConfig) -> str | None:
    return None if c.api in APIS else f"--api must be one of {', '.join(APIS)} (got {c.api!r})"


def backoff_is_capped(c: LoadConfig) -> str | None:
    return _between("--backoff", c.backoff_s, 0, MAX_BACKOFF_S, low_open=False)


def bucket_is_capped(c: LoadConfig) -> str | None:
    return _between(
        "--timeline-bucket", c.timeline_bucket_s, MIN_BUCKET_S, MAX_BUCKET_S, low_open=False
    )


def timeline_is_bounded(c: LoadConfig) -> str | None:
    if not c.timeline_bucket_s > 0:
        return None  # bucket_is_capped names it
    rows = (c.duration_s + c.timeout_s) / c.timeline_bucket_s
    if rows <= MAX_TIMELINE_BUCKETS:
        return None
    return (
        f"--timeline-bucket {c.timeline_bucket_s:g} s gives {rows:.0f} rows over "
        f"duration + timeout, more than {MAX_TIMELINE_BUCKETS}: use a wider bucket"
    )


CHECKS: tuple[Callable[[LoadConfig], str | None], ...] = (
    shape_is_given,
    model_is_named,
    concurrency_is_capped,
    duration_is_capped,
    max_requests_is_capped,
    max_tokens_is_capped,
    timeout_is_capped,
    workload_is_known,
    api_is_known,
    backoff_is_capped,
    bucket_is_capped,
    timeline_is_bounded,
)
