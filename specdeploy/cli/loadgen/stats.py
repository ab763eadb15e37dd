"""Percentiles and the run's summary: the figures the text and the JSON both report."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from specdeploy.cli.loadgen.ramp import format_ramp
from specdeploy.cli.loadgen.results import OUTCOMES
from specdeploy.cli.loadgen.runner import LoadRun

QUANTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile with linear interpolation between ranks (None if empty)."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution_ms(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99 and mean in milliseconds, with how many values they came from."""
    ms = [s * 1000.0 for s in seconds]
    figures: dict[str, float | int | None] = {f"p{q}": _round(percentile(ms, q)) for q in QUANTILES}
    figures["mean"] = _round(sum(ms) / len(ms)) if ms else None
    figures["count"] = len(ms)
    return figures


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summarize(run: LoadRun) -> dict[str, Any]:
    """The run's headline figures (TTFT, TPOT and latency over the successful requests)."""
    ok = [r.measured for r in run.results if r.measured.ok]
    reasons = Counter(r.measured.reason for r in run.results if r.measured.reason is not None)
    outcomes = Counter(r.measured.outcome for r in run.results)
    tokens = sum(m.output_tokens for m in ok)
    elapsed = run.elapsed_s
    c = run.config
    return {
        "workload": c.workload,
        "prompts": run.prompt_source,
        "api": c.api,
        "model": c.model,
        "url": c.url,
        "concurrency": c.concurrency,
        "duration_s": c.duration_s,
        "max_requests": c.max_requests,
        "max_tokens": c.max_tokens,
        "ignore_eos": c.ignore_eos,
        "timeout_s": c.timeout_s,
        "seed": c.seed,
        "ramp": format_ramp(c.ramp) if c.ramp else None,
        "backoff_s": c.backoff_s,
        "started_at_unix": round(run.started_at_unix, 3),
        "elapsed_s": round(elapsed, 3),
        "stopped_by": run.stopped_by,
        "max_in_flight": run.max_in_flight,
        "requests": {
            "sent": run.sent,
            **{name: outcomes[name] for name in OUTCOMES},
            "cancelled": run.cancelled,
            "by_reason": dict(sorted(reasons.items())),
        },
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / elapsed, 3) if elapsed > 0 else None,
        "requests_per_s": round(len(ok) / elapsed, 3) if elapsed > 0 else None,
        "ttft_ms": distribution_ms([m.ttft_s for m in ok if m.ttft_s is not None]),
        "tpot_ms": distribution_ms([m.tpot_s for m in ok if m.tpot_s is not None]),
        "latency_ms": distribution_ms([m.latency_s for m in ok]),
    }
