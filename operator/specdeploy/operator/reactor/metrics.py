"""The operator's own Prometheus metrics, on a port of its own (``--metrics-port``).

Why the operator exports anything: the pods' metrics say what the fleet
does, not whether the controller keeps up. A platform team alerts on
reconciles that keep failing, on a telemetry loop that stopped (its last
cycle's timestamp) and on Prometheus refusing the loop's queries, and sizes
the operator's API traffic from its writes. Names start with
``specdeploy_operator_``; the registry is the operator's own (never the
process-global one), so tests read a private registry and nothing a library
registers leaks onto the endpoint.

=====================================================================  =========================
``specdeploy_operator_info{version}``                                  gauge, 1
``specdeploy_operator_reconciles_total{outcome}``                      ok | retry | error
``specdeploy_operator_reconcile_duration_seconds{outcome}``            histogram
``specdeploy_operator_reconcile_queue_depth``                          reconciles waiting a slot
``specdeploy_operator_api_writes_total{kind,verb,subresource}``        every write sent
``specdeploy_operator_telemetry_intervals_total``                      one per deployment interval
``specdeploy_operator_promql_queries_total``                           queries sent
``specdeploy_operator_promql_query_failures_total{problem}``           by the condition reason
``specdeploy_operator_telemetry_cycle_seconds``                        the last cycle's duration
``specdeploy_operator_telemetry_last_cycle_timestamp_seconds``         when it ended
``specdeploy_operator_deployments``                                    SpeculativeDeployments seen
``specdeploy_operator_pools``                                          pools in their status
``specdeploy_operator_leader``                                         1 leading, 0 standing by
``specdeploy_operator_telemetry_interval_seconds``                     the longest interval read
``specdeploy_operator_profiling_failed{specdeploy_pool,...}``          1 per pool profiling failed
=====================================================================  =========================

Outcomes: ``ok`` the reconcile finished (with or without writes);
``retry`` our view was stale (a conflict), decided again at once;
``error`` the API refused or did not answer (retried after a delay), or
the reconcile raised. A write's ``verb`` is the API server's (create,
update, patch, apply, delete), ``kind`` the object's, ``subresource``
``status`` for status writes and empty otherwise; writes are counted when
sent, whatever the answer (the leader election's Lease requests go through
a client of their own and are not counted). ``leader`` is 1 while this
process holds the leader Lease and acts (always 1 with ``--leader-elect=false``),
0 while it stands by: its ``/metrics`` is served either way, so
``sum(specdeploy_operator_leader)`` is the number of acting operators (1).
A telemetry cycle is a tick of the loop that
read at least one deployment's interval. ``telemetry_interval_seconds`` is
the longest ``spec.telemetry.interval`` among the deployments the loop reads
(0 when it reads none), so an alert can say "no cycle for N intervals"
without knowing the specs. ``profiling_failed`` has one series, value 1, per
pool whose Profiled condition says its profiling failed (labels
``specdeploy_namespace``, ``specdeploy_deployment``, ``specdeploy_pool``:
the deployment's namespace, and its name and pool as the pods' label values,
so the operator's own ``namespace`` scrape label is never overwritten); the
series goes when the pool recovers or the deployment goes.

Derived rates, for dashboards and alerts::

    sum by (outcome) (rate(specdeploy_operator_reconciles_total[5m]))
    histogram_quantile(0.99,
      sum by (le) (rate(specdeploy_operator_reconcile_duration_seconds_bucket[5m])))
    sum by (kind, verb) (rate(specdeploy_operator_api_writes_total[5m]))
    sum(rate(specdeploy_operator_promql_query_failures_total[5m]))
      / rate(specdeploy_operator_promql_queries_total[5m])
    time() - specdeploy_operator_telemetry_last_cycle_timestamp_seconds  # the loop stalled
      > 3 * specdeploy_operator_telemetry_interval_seconds

Counting costs a dict lookup and an add under ``prometheus_client``'s
lock, off the event loop's critical path; every recording method is
guarded (``_never_raises``): a bug here logs once and never breaks a
reconcile or a telemetry interval.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ParamSpec

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from specdeploy.operator.clients import k8s
from specdeploy.operator.decision.status import PROFILED, PROFILING_FAILED, names_pool
from specdeploy.operator.naming import deployment_name, label_value
from specdeploy.operator.telemetry.window import FetchProblem
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import APPLY_PATCH, JSON

__all__ = [
    "DEFAULT_PORT",
    "MeteredApi",
    "OperatorMetrics",
    "Outcome",
    "write_labels",
]

log = logging.getLogger("specdeploy.operator.reactor.metrics")
P = ParamSpec("P")

DEFAULT_PORT = 9401
"""Beside the add-on's 9400 (``builders.deployment.METRICS_PORT``) and away from
kopf's liveness 8080, so an operator run on a laptop next to a pod collides with neither."""
PREFIX = "specdeploy_operator_"
RECONCILE_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""A no-op reconcile is a handful of GETs (~10 ms); a slow API server, seconds."""
VERBS = {"POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "patch"}
_PLURALS = {kind.plural: name for name, kind in paths.KINDS.items()}


class Outcome(StrEnum):
    """How one reconcile ended (module docstring)."""

    OK = "ok"
    RETRY = "retry"
    ERROR = "error"


def _never_raises(method: Callable[P, None]) -> Callable[P, None]:
    """Metrics are a by-product: an error in one is logged once, and swallowed."""
    failed = False

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        nonlocal failed
        try:
            method(*args, **kwargs)
        except Exception:
            if not failed:
                failed = True
                log.exception("metrics: %s failed (logged once; the operator goes on)", method)

    return guarded


def _version() -> str:
    try:
        return importlib.metadata.version("specdeploy")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def write_labels(method: str, path: str, content_type: str = JSON) -> tuple[str, str, str] | None:
    """(kind, verb, subresource) of a request to ``path``; None for a read. Pure.

    ``/apis/apps/v1/namespaces/ns/deployments/x`` PATCHed with server-side
    apply is ("Deployment", "apply", ""); an unknown plural stands for its kind.
    """
    verb = VERBS.get(method.upper())
    if verb is None:
        return None
    if verb == "patch" and content_type == APPLY_PATCH:
        verb = "apply"
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    plural = parts[0] if parts else ""
    subresource = parts[2] if len(parts) > 2 else ""
    return _PLURALS.get(plural, plural), verb, subresource


def pools_of(bodies: Iterable[Mapping[str, Any]]) -> int:
    """Pools the operator has decided for these deployments (their ``status.pools``)."""
    return sum(len((b.get("status") or {}).get("pools") or ()) for b in bodies)


POOL_LABELS = ["specdeploy_namespace", "specdeploy_deployment", "specdeploy_pool"]
"""A pool's labels on the operator's series: the deployment's namespace (its own
``namespace`` scrape label is the operator pod's), its name and pool as label values."""
PoolLabels = tuple[str, str, str]
"""(namespace, deployment label value, pool label value) of one pool."""


def profiling_failed_pools(bodies: Iterable[Mapping[str, Any]]) -> set[PoolLabels]:
    """Pools whose deployment's Profiled condition is False with ProfilingFailed, naming them."""
    failed: set[PoolLabels] = set()
    for body in bodies:
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        for cond in status.get("conditions") or ():
            if cond.get("type") != PROFILED or cond.get("reason") != PROFILING_FAILED:
                continue
            message = str(cond.get("message") or "")
            for pool in status.get("pools") or ():
                gpu = str(pool.get("gpuType") or "")
                if gpu and names_pool(message, gpu):
                    name = label_value(str(meta.get("name") or ""))
                    failed.add((str(meta.get("namespace") or ""), name, label_value(gpu)))
    return failed


PoolState = tuple[str, str, str, str]
"""(namespace, deployment label value, pool label value, state) of one pool."""


def pool_states(bodies: Iterable[Mapping[str, Any]]) -> set[PoolState]:
    """Each pool's ``state`` in its deployment's status (Profiling, RollingOut, Ready, ...)."""
    found: set[PoolState] = set()
    for body in bodies:
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        name = label_value(str(meta.get("name") or ""))
        for pool in status.get("pools") or ():
            gpu, state = str(pool.get("gpuType") or ""), str(pool.get("state") or "")
            if gpu and state:
                found.add((str(meta.get("namespace") or ""), name, label_value(gpu), state))
    return found


FloorLabels = tuple[str, str, str, str]
"""(namespace, deployment label value, pool label value, floor state) of one pool."""
RatioLabels = tuple[str, str, str, str, str]
"""(namespace, deployment label value, pool label value, source, bound) of one R series."""
RATIO_BOUNDS = (("ratio", "estimate"), ("ratioLow", "low"), ("ratioHigh", "high"))
"""``status.pools[].floor`` fields and the ``bound`` label each becomes."""


FloorSeen = tuple[str, dict[str, float]]
"""Whose R the floor holds (``pool`` | ``canary``) and its value by bound."""


def pool_floors(bodies: Iterable[Mapping[str, Any]]) -> dict[FloorLabels, FloorSeen]:
    """Each pool's live-floor state and its last R (``status.pools[].floor``), by bound.

    R is the pool's while it speculates and its canary's once a canary window has
    been judged in plain decoding (until then the floor still holds the pool's
    last losing R); a pool the floor has not judged yet has no entry, a judged
    one without R no bounds.
    """
    found: dict[FloorLabels, FloorSeen] = {}
    for body in bodies:
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        name = label_value(str(meta.get("name") or ""))
        for pool in status.get("pools") or ():
            floor, gpu = pool.get("floor") or {}, str(pool.get("gpuType") or "")
            if not gpu or not floor.get("state"):
                continue
            labels = (str(meta.get("namespace") or ""), name, label_value(gpu), floor["state"])
            canary = floor["state"] == "plain" and bool(floor.get("canaryAt"))
            found[labels] = (
                "canary" if canary else "pool",
                {
                    bound: float(floor[field])
                    for field, bound in RATIO_BOUNDS
                    if isinstance(floor.get(field), int | float)
                },
            )
    return found


def ratio_series(floors: Mapping[FloorLabels, FloorSeen]) -> dict[RatioLabels, float]:
    """R's series, one per bound, labelled with whose R it is."""
    return {
        (ns, dep, pool, source, bound): value
        for (ns, dep, pool, _state), (source, bounds) in floors.items()
        for bound, value in bounds.items()
    }


ScaleLabels = tuple[str, str, str, str]
"""(namespace, pool Deployment name, deployment label value, pool label value)."""


def pool_scaling(bodies: Iterable[Mapping[str, Any]]) -> dict[ScaleLabels, tuple[float, float]]:
    """Per pool with an autoscaler's view: (wanted replicas, capacity tokens/s; NaN unknown)."""
    found: dict[ScaleLabels, tuple[float, float]] = {}
    for body in bodies:
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        name = str(meta.get("name") or "")
        for pool in status.get("pools") or ():
            scaling, gpu = pool.get("autoscaling") or {}, str(pool.get("gpuType") or "")
            wanted, capacity = scaling.get("wantedReplicas"), scaling.get("capacityTokensPerSecond")
            if not gpu or wanted is None:
                continue
            labels = (
                str(meta.get("namespace") or ""),
                deployment_name(name, gpu),
                label_value(name),
                label_value(gpu),
            )
            found[labels] = (float(wanted), math.nan if capacity is None else float(capacity))
    return found


def _value_series(gauge: Gauge, old: set[Any], new: Mapping[Any, float]) -> set[Any]:
    """One series per label tuple in ``new`` with its value; those only in ``old`` removed."""
    for labels, value in new.items():
        gauge.labels(*labels).set(value)
    for labels in old - set(new):
        gauge.remove(*labels)
    return set(new)


def _flag_series(gauge: Gauge, old: set[Any], new: set[Any]) -> set[Any]:
    """A 1-valued series per label tuple in ``new``; those only in ``old`` are removed.

    The new series are set before the old are removed, so a scrape never sees a
    continuing series missing (that would reset an alert's ``for``).
    """
    for labels in new:
        gauge.labels(*labels).set(1)
    for labels in old - new:
        gauge.remove(*labels)
    return new


class OperatorMetrics:
    """Every series the operator exports, in a registry of its own."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, version: str | None = None
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.info = Gauge(
            PREFIX + "info", "The running operator (value 1)", ["version"], registry=r
        )
        self.info.labels(version or _version()).set(1)
        self.reconciles = Counter(
            PREFIX + "reconciles",
            "Reconciles of a SpeculativeDeployment, by outcome",
            ["outcome"],
            registry=r,
        )
        self.reconcile_seconds = Histogram(
            PREFIX + "reconcile_duration_seconds",
            "Wall time of one reconcile (gather, decide, plan, send), by outcome",
            ["outcome"],
            buckets=RECONCILE_SECONDS_BUCKETS,
            registry=r,
        )
        self.api_writes = Counter(
            PREFIX + "api_writes",
            "API writes sent (answered or refused)",
            ["kind", "verb", "subresource"],
            registry=r,
        )
        self.queue_depth = Gauge(
            PREFIX + "reconcile_queue_depth",
            "Reconciles waiting for a free slot (the fair work queue)",
            registry=r,
        )
        self.intervals = Counter(
            PREFIX + "telemetry_intervals",
            "Telemetry intervals run, one per deployment (whether Prometheus answered or not)",
            registry=r,
        )
        self.queries = Counter(
            PREFIX + "promql_queries", "PromQL queries sent to Prometheus", registry=r
        )
        self.query_failures = Counter(
            PREFIX + "promql_query_failures",
            "PromQL queries that failed, by problem",
            ["problem"],
            registry=r,
        )
        self.cycle_seconds = Gauge(
            PREFIX + "telemetry_cycle_seconds",
            "Duration of the last telemetry cycle (list, profiles, queries, deliveries)",
            registry=r,
        )
        self.cycle_timestamp = Gauge(
            PREFIX + "telemetry_last_cycle_timestamp_seconds",
            "Unix time at which the last telemetry cycle ended",
            registry=r,
        )
        self.deployments = Gauge(
            PREFIX + "deployments", "SpeculativeDeployments the operator sees", registry=r
        )
        self.pools = Gauge(
            PREFIX + "pools", "Pools in the SpeculativeDeployments' status", registry=r
        )
        self.leader = Gauge(
            PREFIX + "leader",
            "1 while this process holds the leader Lease and acts, 0 while it stands by",
            registry=r,
        )
        self.telemetry_interval = Gauge(
            PREFIX + "telemetry_interval_seconds",
            "The longest telemetry interval among the deployments the loop reads (0: none)",
            registry=r,
        )
        self.profiling_failed = Gauge(
            PREFIX + "profiling_failed",
            "1 for each pool whose profiling failed (its Profiled condition says so)",
            POOL_LABELS,
            registry=r,
        )
        self.pool_state = Gauge(
            PREFIX + "pool_state",
            "1 for each pool's current state (Profiling, RollingOut, Ready, Degraded, Failed)",
            [*POOL_LABELS, "state"],
            registry=r,
        )
        scale_labels = ["specdeploy_namespace", "deployment", "specdeploy_deployment"]
        self.wanted_replicas = Gauge(
            PREFIX + "pool_wanted_replicas",
            "Replicas the capacity model wants for each autoscaled pool, within its bounds "
            "and GPUs (the metric of mode hpa and keda; deployment: the pool's Deployment)",
            [*scale_labels, "specdeploy_pool"],
            registry=r,
        )
        self.capacity = Gauge(
            PREFIX + "pool_replica_capacity_tokens_per_second",
            "One replica's output tokens/s at the pool's latency target (the capacity model)",
            [*scale_labels, "specdeploy_pool"],
            registry=r,
        )
        self.floor_state = Gauge(
            PREFIX + "pool_floor_state",
            "1 for each pool's live-floor state (speculating | plain: rolled to plain "
            "decoding on live evidence, one canary replica speculating)",
            [*POOL_LABELS, "state"],
            registry=r,
        )
        self.live_ratio = Gauge(
            PREFIX + "pool_live_ratio",
            "R: live throughput over plain decoding's at the batch sizes served, in the "
            "floor's last judged window (source: the pool's, or its canary's once judged in "
            "plain decoding; bound estimate | low | high, the 95% interval)",
            [*POOL_LABELS, "source", "bound"],
            registry=r,
        )
        self._floors: set[FloorLabels] = set()
        self._ratios: set[RatioLabels] = set()
        self._scaled: set[ScaleLabels] = set()
        self._sized: set[ScaleLabels] = set()
        self._failed: set[PoolLabels] = set()
        self._states: set[PoolState] = set()
        # Every outcome and problem exists at 0 from the start, so rate() and
        # alerts see the first failure as a change rather than a new series.
        for outcome in Outcome:
            self.reconciles.labels(outcome.value)
            self.reconcile_seconds.labels(outcome.value)
        for problem in FetchProblem:
            self.query_failures.labels(problem.value)

    @_never_raises
    def reconciled(self, outcome: Outcome, seconds: float) -> None:
        self.reconciles.labels(outcome.value).inc()
        self.reconcile_seconds.labels(outcome.value).observe(seconds)

    @_never_raises
    def queued(self, waiting: int) -> None:
        self.queue_depth.set(waiting)

    @_never_raises
    def wrote(self, method: str, path: str, content_type: str = JSON) -> None:
        labels = write_labels(method, path, content_type)
        if labels is not None:
            self.api_writes.labels(*labels).inc()

    @_never_raises
    def interval_ran(self, deployments: int = 1) -> None:
        self.intervals.inc(deployments)

    @_never_raises
    def queried(self, problem: FetchProblem | None) -> None:
        """One PromQL query answered (None) or failed (its problem)."""
        self.queries.inc()
        if problem is not None:
            self.query_failures.labels(problem.value).inc()

    @_never_raises
    def cycle(self, seconds: float, *, ended: float | None = None) -> None:
        self.cycle_seconds.set(seconds)
        self.cycle_timestamp.set(time.time() if ended is None else ended)

    @_never_raises
    def known(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        """The deployments one list returned: how many, and their pools."""
        self.deployments.set(len(bodies))
        self.pools.set(pools_of(bodies))
        self._failed = _flag_series(
            self.profiling_failed, self._failed, profiling_failed_pools(bodies)
        )
        self._states = _flag_series(self.pool_state, self._states, pool_states(bodies))
        floors = pool_floors(bodies)
        self._floors = _flag_series(self.floor_state, self._floors, set(floors))
        self._ratios = _value_series(self.live_ratio, self._ratios, ratio_series(floors))
        scaling = pool_scaling(bodies)
        self._scaled = _value_series(
            self.wanted_replicas, self._scaled, {k: w for k, (w, _) in scaling.items()}
        )
        self._sized = _value_series(
            self.capacity, self._sized, {k: c for k, (_, c) in scaling.items() if not math.isnan(c)}
        )

    @_never_raises
    def interval(self, seconds: float | None) -> None:
        """The longest interval among the deployments read (None: none is read)."""
        self.telemetry_interval.set(0.0 if seconds is None else seconds)

    @_never_raises
    def leading(self, leads: bool) -> None:
        self.leader.set(1 if leads else 0)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Start ``/metrics`` in a daemon thread (not kopf's loop); return the server.

        A port that cannot be bound raises OSError: at start-up that is a
        configuration error, reported before the operator watches anything.
        """
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server


@dataclass
class MeteredApi:
    """``k8s.Api`` that counts every write it sends: the one write path of the operator.

    The reconciler's requests (``k8s.send``) and the telemetry loop's
    profile-status patches both go through the client the operator was
    given, so wrapping it counts all of them and changes neither.
    """

    inner: k8s.Api
    metrics: OperatorMetrics

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        if method != "GET":
            self.metrics.wrote(method, path, content_type)
        return self.inner.request(method, path, body=body, content_type=content_type, query=query)
