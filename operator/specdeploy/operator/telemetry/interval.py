"""``spec.telemetry.interval`` ("60s", "2m", "1h") in seconds.

The CRD's pattern admits exactly these forms; this re-checks (an object may
predate the CRD) and bounds the result, because a 1 s loop against a fleet
is a load test of Prometheus, not telemetry.
"""

from __future__ import annotations

import re

MIN_SECONDS = 10.0
MAX_SECONDS = 24 * 3600.0
_FORM = re.compile(r"^([1-9][0-9]{0,6})(s|m|h)$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0}


class IntervalError(ValueError):
    """An interval that is not ``<n>s``, ``<n>m`` or ``<n>h``."""


def parse_interval(text: str) -> float:
    """Seconds, clamped to [MIN_SECONDS, MAX_SECONDS]; IntervalError names the bad text."""
    match = _FORM.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise IntervalError(f"interval {text!r}: expected <n>s, <n>m or <n>h, e.g. 60s")
    seconds = int(match.group(1)) * _UNIT[match.group(2)]
    return min(max(seconds, MIN_SECONDS), MAX_SECONDS)


def promql_duration(seconds: float) -> str:
    """A PromQL range duration in whole seconds (``[90s]``)."""
    return f"{max(round(seconds), 1)}s"
