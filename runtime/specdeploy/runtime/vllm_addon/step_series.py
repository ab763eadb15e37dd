"""The per-step series as plain integers, turned into Prometheus families only when scraped.

Every engine step updates a dozen series (steps by K, the K and batch size
in force, reached/proposed/accepted per position, verified tokens,
sequence-steps, the step-time histogram). With ``prometheus_client``'s own
objects each update takes a lock (about 0.35 us on the CPU box here, 15-20
of them per step); the add-on promises to cost nothing on the engine's
critical path, so the step only adds to Python lists here, and the
registry calls ``collect`` on the metrics thread at scrape time. A scrape
may see one step's update half applied (reached counted, accepted not yet):
the series stay monotonic and the difference is one step.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from specdeploy.runtime.contract import Series, SeriesLabel, bucket_bounds, bucket_label, bucket_of
from specdeploy.runtime.policy.base import StepRecord


class StepSeries(Collector):
    """The add-on's per-step counters, gauges and step-time histogram (module docstring)."""

    def __init__(self, pool: str, max_k: int, seconds_buckets: Sequence[float]) -> None:
        self.pool = pool
        self.max_k = max_k
        self.bounds = tuple(seconds_buckets)
        self.steps_by_k = [0] * (max_k + 1)
        self.k_now: int | None = None
        self.batch_size_now: int | None = None
        self.reached = [0] * max_k
        self.proposed = [0] * max_k
        self.accepted = [0] * max_k
        self.totals = [0, 0]
        """Verified tokens, decode sequence-steps."""
        self.seconds: dict[tuple[int, int], list[float]] = {}
        """(batch bucket, K) -> per-bound counts (the last one is +Inf), the seconds' sum,
        then the steps' batch sizes summed (where in its bucket the cell's steps ran)."""

    def record(self, k: int, record: StepRecord) -> None:
        """One finished step: ``k`` the K chosen for it, ``record`` what it verified. Hot path."""
        if 0 <= k <= self.max_k:
            self.steps_by_k[k] += 1
        self.k_now = k
        self.batch_size_now = record.batch_size
        if record.decode_sequences:
            totals = self.totals
            totals[0] += record.verified_tokens
            totals[1] += record.decode_sequences
            _add(self.reached, record.reached)
            _add(self.proposed, record.proposed)
            _add(self.accepted, record.accepted)
        seconds = record.step_seconds
        if seconds is not None:
            size = record.batch_size if record.batch_size > 0 else 1
            key = (bucket_of(size), record.k)
            row = self.seconds.get(key)
            if row is None:
                row = self.seconds[key] = [0.0] * (len(self.bounds) + 3)
            row[bisect_left(self.bounds, seconds)] += 1
            row[-2] += seconds
            row[-1] += size

    def collect(self) -> Iterator[Any]:
        pool = self.pool
        steps = CounterMetricFamily(
            Series.STEPS, "Engine steps, by the K chosen", labels=[SeriesLabel.POOL, SeriesLabel.K]
        )
        for k, n in enumerate(self.steps_by_k):
            steps.add_metric([pool, str(k)], n)
        yield steps
        for name, value, doc in (
            (Series.K, self.k_now, "K chosen for the latest step"),
            (Series.BATCH_SIZE, self.batch_size_now, "Scheduled requests in the latest step"),
        ):
            if value is not None:
                gauge = GaugeMetricFamily(name, doc, labels=[SeriesLabel.POOL])
                gauge.add_metric([pool], value)
                yield gauge
        for name, values, doc in (
            (
                Series.REACHED,
                self.reached,
                "Decoding sequences that reached a draft position (K >= i, earlier ones "
                "accepted), proposed or not",
            ),
            (
                Series.PROPOSED,
                self.proposed,
                "Draft tokens proposed at a reached position",
            ),
            (Series.ACCEPTED, self.accepted, "Draft tokens accepted, by position"),
        ):
            family = CounterMetricFamily(name, doc, labels=[SeriesLabel.POOL, SeriesLabel.POSITION])
            for i, n in enumerate(values):
                if n:
                    family.add_metric([pool, str(i + 1)], n)
            yield family
        verified, sequence_steps = self.totals
        for name, value, doc in (
            (
                Series.VERIFIED,
                verified,
                "Tokens verified by decoding sequences (1 + proposal length each)",
            ),
            (
                Series.SEQUENCE_STEPS,
                sequence_steps,
                "Decoding sequences summed over steps (the denominator of tokens per sequence)",
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=[SeriesLabel.POOL])
            family.add_metric([pool], value)
            yield family
        yield self._histogram()
        yield self._batch_sizes()

    def _batch_sizes(self) -> CounterMetricFamily:
        family = CounterMetricFamily(
            Series.STEP_BATCH_SIZES,
            "Batch sizes summed over the clean decode steps the step-time histogram counts, "
            "by its buckets and K (over its count: the cell's mean batch size)",
            labels=[SeriesLabel.POOL, SeriesLabel.BATCH_BUCKET, SeriesLabel.K],
        )
        for (bucket, k), row in sorted(self.seconds.items()):
            label = bucket_label(bucket_bounds(bucket)[1])
            family.add_metric([self.pool, label, str(k)], row[-1])
        return family

    def _histogram(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            Series.STEP_SECONDS,
            "Step time of clean decode steps (no prefill, K unchanged), by batch-size bucket and K",
            labels=[SeriesLabel.POOL, SeriesLabel.BATCH_BUCKET, SeriesLabel.K],
        )
        edges = [*(repr(float(b)) for b in self.bounds), "+Inf"]
        for (bucket, k), row in sorted(self.seconds.items()):
            running, cumulative = 0.0, []
            for edge, n in zip(edges, row[:-2], strict=True):
                running += n
                cumulative.append((edge, running))
            label = bucket_label(bucket_bounds(bucket)[1])
            family.add_metric([self.pool, label, str(k)], cumulative, row[-2])
        return family


def _add(total: list[int], counts: Sequence[int]) -> None:
    """``total[i] += counts[i]`` (positions past maxK dropped)."""
    n = len(total)
    for i, c in enumerate(counts):
        if i < n:
            total[i] += c
