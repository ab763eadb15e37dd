"""The run over time: per bucket, the load asked for and what came back (no I/O).

Why: an autoscaler's e2e and benchmark plot load against the replicas and
K that Prometheus recorded, so the run must say *when* it asked for what,
not only its totals. Rows are ``bucket_s`` wide from the run's start, and
``started_at_unix`` in the document places them on Prometheus' clock.

Per row: ``t_s`` (the bucket's start), ``concurrency`` (the workers asked
for, averaged over the bucket: a stage boundary inside it gives a value in
between), ``started`` (requests sent in it), ``ok``/``refused``/``failed``/
``timed_out`` (requests that ended in it, by outcome), ``output_tokens_per_s``
and ``tpot_ms_mean``. Tokens are those of successful requests (so the rows
add up to the summary's ``output_tokens``), spread evenly from a request's
first token to its last: the client sees tokens in chunks, and counting a
long request in the second it ended would draw a spike that never was.
TPOT is the mean over the successful requests that ended in the bucket.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specdeploy.cli.loadgen.ramp import Stage, mean_concurrency
from specdeploy.cli.loadgen.results import OUTCOMES, RequestResult
from specdeploy.cli.loadgen.runner import LoadRun


@dataclass
class _Bucket:
    started: int = 0
    ended: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    tokens: float = 0.0
    tpots: list[float] = field(default_factory=list)


def bucket_count(elapsed_s: float, bucket_s: float) -> int:
    """Rows that cover ``[0, elapsed_s]`` (at least one)."""
    return max(1, math.ceil(elapsed_s / bucket_s - 1e-9))


def _index(t: float, bucket_s: float, count: int) -> int:
    return min(max(int(t // bucket_s), 0), count - 1)


def spread(buckets: list[_Bucket], start: float, end: float, amount: float, width: float) -> None:
    """Add ``amount`` to the buckets that ``[start, end]`` overlaps, by overlap."""
    count = len(buckets)
    if end <= start:
        buckets[_index(start, width, count)].tokens += amount
        return
    for i in range(_index(start, width, count), _index(end, width, count) + 1):
        low, high = max(start, i * width), min(end, (i + 1) * width)
        if i == count - 1:
            high = end  # the last row takes the tail past its nominal end
        if high > low:
            buckets[i].tokens += amount * (high - low) / (end - start)


def _take(buckets: list[_Bucket], result: RequestResult, t0: float, width: float) -> None:
    m = result.measured
    ended = m.ended_at - t0
    bucket = buckets[_index(ended, width, len(buckets))]
    bucket.ended[m.outcome] += 1
    if not m.ok:
        return
    if m.tpot_s is not None:
        bucket.tpots.append(m.tpot_s)
    first = m.first_token_at if m.first_token_at is not None else m.ended_at
    last = m.last_token_at if m.last_token_at is not None else first
    spread(buckets, first - t0, last - t0, float(m.output_tokens), width)


def timeline_rows(
    run: LoadRun, *, stages: Sequence[Stage], bucket_s: float
) -> list[dict[str, Any]]:
    """One row per ``bucket_s`` from the start to the end of ``run``."""
    t0 = run.clock_start
    count = bucket_count(run.elapsed_s, bucket_s)
    buckets = [_Bucket() for _ in range(count)]
    for started in run.started_s:
        buckets[_index(started, bucket_s, count)].started += 1
    for result in run.results:
        _take(buckets, result, t0, bucket_s)
    return [_row(i, b, stages, bucket_s) for i, b in enumerate(buckets)]


def _row(i: int, bucket: _Bucket, stages: Sequence[Stage], width: float) -> dict[str, Any]:
    start = i * width
    tpot = sum(bucket.tpots) / len(bucket.tpots) * 1000.0 if bucket.tpots else None
    return {
        "t_s": round(start, 6),
        "concurrency": round(mean_concurrency(stages, start, start + width), 3),
        "started": bucket.started,
        **bucket.ended,
        "output_tokens_per_s": round(bucket.tokens / width, 3),
        "tpot_ms_mean": None if tpot is None else round(tpot, 3),
    }


def timeline(run: LoadRun) -> dict[str, Any]:
    """The document's ``timeline``: its bucket, its start on the wall clock, and its rows."""
    c = run.config
    return {
        "bucket_s": c.timeline_bucket_s,
        "started_at_unix": round(run.started_at_unix, 3),
        "rows": timeline_rows(run, stages=c.stages, bucket_s=c.timeline_bucket_s),
    }
