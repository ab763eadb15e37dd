"""The add-on's own time inside the engine, per step: measured where it is spent, off by default.

The add-on promises to cost nothing: its whole per-step work (the replaced
lookup, the bookkeeping in ``schedule()``, reading the step, step
accounting, the policy, the metrics) at most 1% of the step at every batch
size (issue 12, item 7). A throughput comparison against plain vLLM cannot
show 1% on a shared 2-core box (run-to-run spread is 5-30%), so the add-on
times itself: with ``SPECDEPLOY_ADDON_TIMING=1`` in the engine's
environment, the scheduler wraps its hooks in ``time.perf_counter_ns`` and
this accumulates, per batch-size bucket, the add-on's nanoseconds and the
step's wall time (``schedule()`` start to the end of ``update_from_output``);
the table watcher's thread adds the time of each check (it holds the GIL
while it runs). The timing itself costs about six clock reads per step.

The totals are plain integers, exported only when scraped (a collector on
the add-on's registry), so the accounting adds no lock to the hot path:

* ``specdeploy_addon_self_seconds_total{batch_bucket,part}``: ``schedule``
  (the replaced lookup and the bookkeeping after ``schedule()``), ``read``
  (reading the step before vLLM's update), ``account`` (the step record,
  the policy's observe, the metrics, the drafting-rate watch)
* ``specdeploy_addon_step_wall_seconds_total{batch_bucket}``
* ``specdeploy_addon_timed_steps_total{batch_bucket}``
* ``specdeploy_addon_watcher_seconds_total``

The share of the step is the ratio of the first two over any interval
(``bench/addon_step_cost.py`` reads them around each load level).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from specdeploy.runtime.contract import bucket_label, bucket_of

PARTS = ("schedule", "read", "account")
"""Where the add-on's time goes in one step (module docstring)."""
TIMING_ENV = "SPECDEPLOY_ADDON_TIMING"
"""Set to 1 (or true, yes, on) to time the add-on; a benchmark knob, not a pod setting."""


def timing_requested(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for the add-on's self-timing."""
    value = (os.environ if env is None else env).get(TIMING_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


class SelfTimer:
    """Per-bucket totals of the add-on's own nanoseconds, by part, and the steps' wall time."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.pending_ns = 0
        """``schedule`` time of the step in progress (the lookup and ``schedule()``'s part)."""
        self._totals: dict[int, list[int]] = {}
        self.watcher_ns = 0

    def end_step(self, batch_size: int, read_ns: int, account_ns: int, step_ns: int) -> None:
        """Close one step with its ``read`` and ``account`` time (``schedule`` is pending)."""
        bucket = bucket_of(batch_size if batch_size > 0 else 1)
        row = self._totals.get(bucket)
        if row is None:
            row = self._totals[bucket] = [0, 0, 0, 0, 0]
        row[0] += self.pending_ns
        row[1] += read_ns
        row[2] += account_ns
        row[3] += step_ns
        row[4] += 1
        self.pending_ns = 0

    def watcher_checked(self, ns: int) -> None:
        self.watcher_ns += ns

    def totals(self) -> dict[int, tuple[tuple[int, int, int], int, int]]:
        """((schedule, read, account) ns, step ns, steps) per batch-size bucket."""
        return {b: ((r[0], r[1], r[2]), r[3], r[4]) for b, r in sorted(self._totals.items())}

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_Exported(self))


class _Exported(Collector):
    """The timer's totals as counters, built at scrape time."""

    def __init__(self, timer: SelfTimer) -> None:
        self.timer = timer

    def collect(self) -> Iterator[Any]:
        labels = ["pool", "batch_bucket"]
        own = CounterMetricFamily(
            "specdeploy_addon_self_seconds",
            "The add-on's own time in the engine's hooks, by part (SPECDEPLOY_ADDON_TIMING)",
            labels=[*labels, "part"],
        )
        wall = CounterMetricFamily(
            "specdeploy_addon_step_wall_seconds",
            "Wall time of the timed steps, schedule() start to update_from_output end",
            labels=labels,
        )
        steps = CounterMetricFamily(
            "specdeploy_addon_timed_steps", "Steps timed by the add-on's self-timing", labels=labels
        )
        pool = self.timer.pool
        for bucket, (parts, step_ns, n) in self.timer.totals().items():
            label = bucket_label(1 << bucket)
            for part, ns in zip(PARTS, parts, strict=True):
                own.add_metric([pool, label, part], ns / 1e9)
            wall.add_metric([pool, label], step_ns / 1e9)
            steps.add_metric([pool, label], n)
        watcher = CounterMetricFamily(
            "specdeploy_addon_watcher_seconds",
            "Time the table watcher's thread spent checking the files",
            labels=["pool"],
        )
        watcher.add_metric([pool], self.timer.watcher_ns / 1e9)
        yield from (own, wall, steps, watcher)
