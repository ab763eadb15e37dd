"""What one load run is asked to do, with defaults that finish and caps that hold.

A load generator left running, or turned up by a typo, is an incident: every
knob has a default that ends on its own (``--max-requests``,
``--max-tokens``, ``--timeout``) and a hard cap that no flag can lift. The
checks are a chain of small named predicates; the first violation is the
error, worded for the CLI (it names the flag).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

WORKLOADS = ("chat", "code", "random")
APIS = ("chat", "completions")

MAX_CONCURRENCY = 1024
MAX_DURATION_S = 3600.0
MAX_REQUESTS_CAP = 100_000
"""Also bounds memory and the JSON: one row is kept per request."""
MAX_TOKENS_CAP = 32_768
MAX_TIMEOUT_S = 600.0

DEFAULT_WORKLOAD = "chat"
DEFAULT_API = "chat"
DEFAULT_MAX_REQUESTS = 10_000
DEFAULT_MAX_TOKENS = 128
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_SEED = 0


class UsageError(ValueError):
    """Invalid input: the CLI prints the message and exits with code 2."""


@dataclass(frozen=True)
class LoadConfig:
    """One run: where, what, how hard and for how long (validated on creation)."""

    url: str
    """The server's base URL (``http://127.0.0.1:8000``); ``--api`` picks the endpoint."""
    model: str
    concurrency: int
    duration_s: float
    workload: str = DEFAULT_WORKLOAD
    api: str = DEFAULT_API
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    ignore_eos: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        for problem in problems(self):
            raise UsageError(problem)


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


CHECKS: tuple[Callable[[LoadConfig], str | None], ...] = (
    model_is_named,
    concurrency_is_capped,
    duration_is_capped,
    max_requests_is_capped,
    max_tokens_is_capped,
    timeout_is_capped,
    workload_is_known,
    api_is_known,
)
