"""The add-on's Prometheus metrics, served on a port of its own.

The scheduler runs in vLLM's engine-core process, not in the API server that
serves vLLM's ``/metrics``, so the add-on keeps its own registry and HTTP
endpoint (``SPECDEPLOY_METRICS_PORT``). Names start with ``specdeploy_`` and
every series carries the pool's GPU type (``pool``), so the operator's
telemetry loop can aggregate per pool with PromQL.

Per step this costs a handful of dictionary lookups and lock-protected
increments (a few microseconds); label children are bound once and cached.

Acceptance counters use conditional denominators (``policy.base``):
``specdeploy_accepted_tokens_total{position="i"} /
specdeploy_draft_tokens_total{position="i"}`` is a_i, the probability that
draft i is accepted given drafts 1..i-1 were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from specdeploy.runtime.policy.estimators import bucket_bounds, bucket_of

STEP_SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
)
"""Doubling from 1 ms (a small model's decode on an H200) to 5 s (a CPU step)."""


def batch_bucket_label(batch_size: int) -> str:
    """The power-of-two bucket of a batch size as a label: "1", "2", "3-4", "5-8", ..."""
    lo, hi = bucket_bounds(bucket_of(max(batch_size, 1)))
    return str(lo) if lo == hi else f"{lo}-{hi}"


class AddonMetrics:
    """Every series the add-on exports, in a registry of its own."""

    def __init__(self, pool: str, max_k: int, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.pool = pool
        r, p = self.registry, ["pool"]
        self.steps = Counter(
            "specdeploy_steps", "Engine steps, by the K chosen", [*p, "k"], registry=r
        )
        self.k_current = Gauge("specdeploy_k", "K chosen for the latest step", p, registry=r)
        self.batch_size = Gauge(
            "specdeploy_batch_size", "Scheduled requests in the latest step", p, registry=r
        )
        self.step_seconds = Histogram(
            "specdeploy_step_seconds",
            "Step time by batch-size bucket and K (steps whose verified width equals K)",
            [*p, "batch_bucket", "k"],
            buckets=STEP_SECONDS_BUCKETS,
            registry=r,
        )
        self.drafted = Counter(
            "specdeploy_draft_tokens",
            "Draft tokens verified at a position whose earlier drafts were all accepted",
            [*p, "position"],
            registry=r,
        )
        self.accepted = Counter(
            "specdeploy_accepted_tokens",
            "Draft tokens accepted, by position",
            [*p, "position"],
            registry=r,
        )
        self.predicted_goodput = Gauge(
            "specdeploy_predicted_goodput_tokens_per_second",
            "The policy's predicted goodput for the K in force at the smoothed batch size",
            p,
            registry=r,
        )
        self.table_generation = Gauge(
            "specdeploy_table_generation",
            "Tables installed since start (1: the first)",
            p,
            registry=r,
        )
        self.table_info = Gauge(
            "specdeploy_table_info",
            "The table in force (value 1)",
            [*p, "policy", "profile", "digest"],
            registry=r,
        )
        self.reload_errors = Counter(
            "specdeploy_table_reload_errors",
            "Table files rejected (the last good table stays)",
            p,
            registry=r,
        )
        self.policy_errors = Counter(
            "specdeploy_policy_errors",
            "Policy calls that raised (the step fell back to vLLM's own schedule)",
            p,
            registry=r,
        )
        self.exploration_steps = Counter(
            "specdeploy_exploration_steps",
            "Steps run at a K other than the policy's best, to learn",
            p,
            registry=r,
        )
        self._steps_by_k = [self.steps.labels(pool, str(k)) for k in range(max_k + 1)]
        self._drafted = [self.drafted.labels(pool, str(i + 1)) for i in range(max_k)]
        self._accepted = [self.accepted.labels(pool, str(i + 1)) for i in range(max_k)]
        self._k_now = self.k_current.labels(pool)
        self._bs_now = self.batch_size.labels(pool)
        self._seconds: dict[tuple[int, int], Any] = {}
        self._info: tuple[str, str, str] | None = None

    def step(
        self,
        batch_size: int,
        k: int,
        seconds: float | None,
        drafted: Sequence[int],
        accepted: Sequence[int],
    ) -> None:
        """One finished step (``seconds`` None: not a clean timing)."""
        if 0 <= k < len(self._steps_by_k):
            self._steps_by_k[k].inc()
        self._k_now.set(k)
        self._bs_now.set(batch_size)
        for i, n in enumerate(drafted[: len(self._drafted)]):
            if n:
                self._drafted[i].inc(n)
        for i, n in enumerate(accepted[: len(self._accepted)]):
            if n:
                self._accepted[i].inc(n)
        if seconds is not None:
            key = (bucket_of(max(batch_size, 1)), k)
            child = self._seconds.get(key)
            if child is None:
                child = self.step_seconds.labels(self.pool, batch_bucket_label(batch_size), str(k))
                self._seconds[key] = child
            child.observe(seconds)

    def table_installed(self, generation: int, policy: str, profile: str, digest: str) -> None:
        if self._info is not None:
            self.table_info.remove(self.pool, *self._info)
        self._info = (policy, profile, digest[:12])
        self.table_info.labels(self.pool, *self._info).set(1)
        self.table_generation.labels(self.pool).set(generation)

    def reload_failed(self) -> None:
        self.reload_errors.labels(self.pool).inc()

    def policy_failed(self) -> None:
        self.policy_errors.labels(self.pool).inc()

    def explored(self, steps: int) -> None:
        if steps > 0:
            self.exploration_steps.labels(self.pool).inc(steps)

    def goodput(self, tokens_per_second: float) -> None:
        self.predicted_goodput.labels(self.pool).set(tokens_per_second)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Start the HTTP endpoint in a daemon thread; returns the server."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
