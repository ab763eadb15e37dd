"""The operator's /metrics: the families it serves, the counters reconciles and intervals move.

Reconciles run through the in-memory API server of ``test_operator_k8s``
(its raw transport made to explode, so nothing reaches a network); the
telemetry loop asks the fake Prometheus of the telemetry tests. Every
value is read from the metrics' private registry.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdeploy.cli import build_parser
from specdeploy.cli.operator import DEFAULT_METRICS_PORT
from specdeploy.operator import main
from specdeploy.operator.api import Phase, PoolStatus
from specdeploy.operator.clients import k8s
from specdeploy.operator.decision.status import profiled_condition
from specdeploy.operator.naming import label_value
from specdeploy.operator.pool.context import PoolOutcome, Profiling
from specdeploy.operator.reactor.metrics import (
    DEFAULT_PORT,
    MeteredApi,
    OperatorMetrics,
    Outcome,
    pool_states,
    profiling_failed_pools,
    write_labels,
)
from specdeploy.operator.reactor.reconcile import Result
from specdeploy.operator.reactor.reconciler import Reconciler
from specdeploy.operator.reactor.telemetry_loop import TelemetryLoop
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import APPLY_PATCH, JSON_PATCH, MERGE_PATCH
from tests.unit.operator.telemetry.fake_prometheus import FakePrometheus, serving
from tests.unit.operator.telemetry.fakes import body as telemetry_body
from tests.unit.operator.test_operator_k8s import (
    H100,
    NS,
    FakeApi,
    cluster,
    create_example,
    no_network,
)

__all__ = ["no_network"]  # the autouse fixture: no connection but loopback ones we open
NAME = "llama-8b-chat"
J = "application/json"
FAMILIES = {
    "specdeploy_operator_info",
    "specdeploy_operator_reconciles",
    "specdeploy_operator_reconcile_duration_seconds",
    "specdeploy_operator_reconcile_queue_depth",
    "specdeploy_operator_api_writes",
    "specdeploy_operator_telemetry_intervals",
    "specdeploy_operator_promql_queries",
    "specdeploy_operator_promql_query_failures",
    "specdeploy_operator_telemetry_cycle_seconds",
    "specdeploy_operator_telemetry_last_cycle_timestamp_seconds",
    "specdeploy_operator_deployments",
    "specdeploy_operator_leader",
    "specdeploy_operator_pools",
    "specdeploy_operator_telemetry_interval_seconds",
    "specdeploy_operator_profiling_failed",
    "specdeploy_operator_pool_state",
    "specdeploy_operator_pool_floor_state",
    "specdeploy_operator_pool_live_ratio",
    "specdeploy_operator_pool_wanted_replicas",
    "specdeploy_operator_pool_replica_capacity_tokens_per_second",
}


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float:
    """A sample of ``specdeploy_operator_<name>`` (0 when absent)."""
    found = metrics.registry.get_sample_value("specdeploy_operator_" + name, labels)
    return 0.0 if found is None else found


def writes(metrics: OperatorMetrics) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["kind"], s.labels["verb"], s.labels["subresource"]): s.value
        for family in metrics.registry.collect()
        if family.name == "specdeploy_operator_api_writes"
        for s in family.samples
        if s.name.endswith("_total")
    }


def new_deployment() -> FakeApi:
    """One H100 node and the example deployment, not yet reconciled."""
    api = cluster(H100)
    create_example(api)
    return api


def reconcile(reconciler: Reconciler) -> None:
    asyncio.run(reconciler.reconcile(NS, NAME))


# --- the endpoint ------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[OperatorMetrics, str]]:
    metrics = OperatorMetrics(version="9.9.9")
    server = metrics.serve(0, "127.0.0.1")  # port 0: one the kernel picks
    try:
        yield metrics, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def scrape(url: str) -> dict[str, Any]:
    """The families served; the 0.0.4 text format's ``*_created`` gauges left out."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    families = text_string_to_metric_families(text)
    return {f.name: f for f in families if not f.name.endswith("_created")}


def test_the_endpoint_serves_every_family_and_only_the_operators(
    served: tuple[OperatorMetrics, str],
) -> None:
    _, url = served
    families = scrape(url)

    assert set(families) == FAMILIES  # a registry of its own: no process or GC collectors
    (info,) = families["specdeploy_operator_info"].samples
    assert (info.labels, info.value) == ({"version": "9.9.9"}, 1.0)


def test_every_outcome_and_problem_is_served_at_zero_before_the_first_event(
    served: tuple[OperatorMetrics, str],
) -> None:
    families = scrape(served[1])

    outcomes = {
        s.labels["outcome"]: s.value
        for s in families["specdeploy_operator_reconciles"].samples
        if s.name.endswith("_total")
    }
    problems = {
        s.labels["problem"]
        for s in families["specdeploy_operator_promql_query_failures"].samples
        if s.name.endswith("_total")
    }
    assert outcomes == {"ok": 0.0, "retry": 0.0, "error": 0.0}
    assert problems == {"PrometheusUnreachable", "PrometheusBadResponse"}


def test_a_scrape_sees_a_reconcile_counted_a_moment_before(
    served: tuple[OperatorMetrics, str],
) -> None:
    metrics, url = served
    metrics.reconciled(Outcome.OK, 0.03)

    samples = {
        (s.name, s.labels.get("outcome"), s.labels.get("le")): s.value
        for s in scrape(url)["specdeploy_operator_reconcile_duration_seconds"].samples
    }
    assert samples[("specdeploy_operator_reconcile_duration_seconds_count", "ok", None)] == 1
    assert samples[("specdeploy_operator_reconcile_duration_seconds_bucket", "ok", "0.025")] == 0
    assert samples[("specdeploy_operator_reconcile_duration_seconds_bucket", "ok", "0.05")] == 1


# --- reconciles --------------------------------------------------------------------


def test_a_reconcile_counts_ok_and_each_write_it_sent_by_kind_and_verb() -> None:
    api = new_deployment()
    metrics = OperatorMetrics()
    reconciler = Reconciler(api=MeteredApi(api, metrics), metrics=metrics)

    reconcile(reconciler)

    sent = api.writes()
    assert sent, "the first reconcile of a new deployment writes"
    assert value(metrics, "reconciles_total", outcome="ok") == 1
    assert value(metrics, "reconcile_duration_seconds_count", outcome="ok") == 1
    assert sum(writes(metrics).values()) == len(sent)
    assert writes(metrics)[("SpeculativeDeployment", "patch", "status")] == 1
    assert writes(metrics)[("Job", "create", "")] == 1
    assert writes(metrics)[("Service", "apply", "")] == 1


def test_a_reconcile_with_nothing_to_change_counts_ok_and_no_write() -> None:
    api = new_deployment()
    metrics = OperatorMetrics()
    reconciler = Reconciler(api=MeteredApi(api, metrics), metrics=metrics)
    for _ in range(4):
        reconcile(reconciler)  # settles: profiling is pending, nothing moves
    before = dict(writes(metrics))

    reconcile(reconciler)

    assert writes(metrics) == before
    assert value(metrics, "reconciles_total", outcome="ok") == 5


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (k8s.RetryLater("conflict"), "retry"),
        (k8s.ApiError("GET", "/x", 503, "{}"), "error"),
        (ConnectionRefusedError("refused"), "error"),
    ],
    ids=["a-stale-view-is-a-retry", "a-refusal-is-an-error", "no-answer-is-an-error"],
)
def test_a_failed_reconcile_is_counted_by_its_outcome(
    monkeypatch: pytest.MonkeyPatch, error: Exception, outcome: str
) -> None:
    def failing(*_: Any, **__: Any) -> Result:
        raise error

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", failing)
    metrics = OperatorMetrics()

    reconcile(Reconciler(api=FakeApi(), metrics=metrics, retry_seconds=60))

    assert value(metrics, "reconciles_total", outcome=outcome) == 1
    assert value(metrics, "reconciles_total", outcome="ok") == 0


def test_a_reconcile_that_raises_a_bug_is_an_error_and_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review H1: a bug (or a failure no one listed) used to reach kopf's event handler,
    which drops it; now it is counted, logged and retried with backoff."""

    def broken(*_: Any, **__: Any) -> Result:
        raise KeyError("spec")

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", broken)
    metrics = OperatorMetrics()
    reconciler = Reconciler(api=FakeApi(), metrics=metrics)
    reconcile(reconciler)
    assert value(metrics, "reconciles_total", outcome="error") == 1
    assert reconciler._failures and list(reconciler._failures.values()) == [1]


class Exploding:
    """Stands in for any prometheus_client object: every use raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"metrics bug: {name}")


def test_a_bug_in_the_metrics_never_breaks_a_reconcile_or_a_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = new_deployment()
    metrics = OperatorMetrics()
    broken: Any = Exploding()
    metrics.reconciles = metrics.reconcile_seconds = metrics.api_writes = broken
    reconciler = Reconciler(api=MeteredApi(api, metrics), metrics=metrics)

    with caplog.at_level(logging.ERROR, logger="specdeploy.operator.reactor.metrics"):
        reconcile(reconciler)

    assert api.of("jobs"), "the reconcile wrote its children all the same"
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert logged and all(isinstance(e, RuntimeError) for e in logged)


# --- writes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "content_type", "labels"),
    [
        ("POST", paths.path("Job", NS), J, ("Job", "create", "")),
        ("PATCH", paths.path("Deployment", NS, "d"), APPLY_PATCH, ("Deployment", "apply", "")),
        (
            "PATCH",
            paths.path("SpeculationProfile", NS, "p", "status"),
            MERGE_PATCH,
            ("SpeculationProfile", "patch", "status"),
        ),
        ("PATCH", paths.path("Job", NS, "j"), JSON_PATCH, ("Job", "patch", "")),
        ("DELETE", paths.path("RoleBinding", NS, "r"), J, ("RoleBinding", "delete", "")),
        ("PUT", paths.path("ConfigMap", NS, "c"), J, ("ConfigMap", "update", "")),
        ("POST", paths.path("Namespace"), J, ("Namespace", "create", "")),
        ("DELETE", paths.path("Namespace", None, "ns"), J, ("Namespace", "delete", "")),
        ("POST", "/apis/example.io/v1/namespaces/x/widgets", J, ("widgets", "create", "")),
        ("GET", paths.path("Job", NS, "j"), J, None),
    ],
    ids=[
        "a-create",
        "server-side-apply",
        "a-status-merge-patch",
        "a-json-patch",
        "a-delete",
        "an-update",
        "a-cluster-scoped-create",
        "a-namespace-itself",
        "an-unknown-plural-names-itself",
        "a-read-is-no-write",
    ],
)
def test_a_write_is_labelled_with_the_kind_the_verb_and_the_subresource(
    method: str, path: str, content_type: str, labels: tuple[str, str, str] | None
) -> None:
    assert write_labels(method, path, content_type) == labels


# --- the telemetry loop ------------------------------------------------------------


class Deployments:
    """An API answering the loop's list with ``bodies`` (and no profile)."""

    def __init__(self, *bodies: dict[str, Any]) -> None:
        self.bodies = bodies

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert method == "GET", "this loop has no profile status to write"
        return {"items": list(self.bodies)}


def tick(fake: FakePrometheus, metrics: OperatorMetrics, *bodies: dict[str, Any]) -> list[str]:
    delivered: list[str] = []

    async def deliver(namespace: str, name: str, report: Any) -> None:
        delivered.append(name)

    async def go() -> None:
        async with serving(fake) as url, aiohttp.ClientSession() as session:
            for b in bodies:
                b["spec"]["telemetry"]["prometheusURL"] = url
            loop = TelemetryLoop(api=Deployments(*bodies), deliver=deliver, metrics=metrics)
            await loop.tick(session)

    asyncio.run(go())
    return delivered


def deployment(name: str, pools: int) -> dict[str, Any]:
    doc = telemetry_body()
    doc["metadata"]["name"] = name
    doc["status"] = {"pools": [{"gpuType": f"gpu-{i}"} for i in range(pools)]}
    return doc


def test_an_interval_counts_its_queries_deployments_pools_and_cycle() -> None:
    fake, metrics = FakePrometheus(), OperatorMetrics()

    delivered = tick(fake, metrics, deployment("a", 2), deployment("b", 1))

    assert sorted(delivered) == ["a", "b"]
    assert value(metrics, "telemetry_intervals_total") == 2
    assert value(metrics, "promql_queries_total") == len(fake.queries) > 0
    assert value(metrics, "deployments") == 2
    assert value(metrics, "pools") == 3
    assert value(metrics, "telemetry_cycle_seconds") > 0
    assert value(metrics, "telemetry_last_cycle_timestamp_seconds") > 1e9
    assert value(metrics, "promql_query_failures_total", problem="PrometheusUnreachable") == 0


@pytest.mark.parametrize(
    ("mode", "problem"),
    [("503", "PrometheusUnreachable"), ("html", "PrometheusBadResponse")],
    ids=["an-unavailable-prometheus", "an-answer-that-is-not-prometheus"],
)
def test_failed_queries_are_counted_by_problem(mode: str, problem: str) -> None:
    fake, metrics = FakePrometheus(mode=mode), OperatorMetrics()

    tick(fake, metrics, deployment("a", 1))

    sent = value(metrics, "promql_queries_total")
    assert sent == len(fake.queries) > 0
    assert value(metrics, "promql_query_failures_total", problem=problem) == sent
    assert value(metrics, "telemetry_intervals_total") == 1


def test_a_tick_with_nothing_due_keeps_the_last_cycles_duration() -> None:
    metrics = OperatorMetrics()
    metrics.cycle(4.0, ended=1_700_000_000.0)

    tick(FakePrometheus(), metrics)  # no deployment: nothing due

    assert value(metrics, "telemetry_cycle_seconds") == 4.0
    assert value(metrics, "deployments") == 0


def failing(name: str, *pools: tuple[str, Profiling]) -> dict[str, Any]:
    """A deployment body whose Profiled condition is what ``status`` writes for ``pools``."""
    outcomes = [
        PoolOutcome(PoolStatus(gpu_type=gpu, state=Phase.FAILED, message=f"Job of {gpu}: x; y"), p)
        for gpu, p in pools
    ]
    condition = profiled_condition(outcomes).model_dump(mode="json", by_alias=True)
    return {
        "metadata": {"namespace": NS, "name": name},
        "spec": {},
        "status": {"conditions": [condition], "pools": [{"gpuType": g} for g, _ in pools]},
    }


def test_the_pools_whose_profiling_failed_are_read_from_the_condition_status_writes() -> None:
    bodies = [
        failing("a", ("NVIDIA-A100", Profiling.FAILED), ("NVIDIA-A100-80GB", Profiling.RUNNING)),
        failing("b", ("NVIDIA-L4", Profiling.READY), ("NVIDIA-H100 80GB", Profiling.FAILED)),
        failing("c", ("NVIDIA-L4", Profiling.RUNNING)),
    ]

    assert profiling_failed_pools(bodies) == {
        (NS, "a", "NVIDIA-A100"),  # not its prefix-sharing neighbour
        (NS, "b", label_value("NVIDIA-H100 80GB")),  # the pool as the pods' label value
    }


POOLS = ("gpu-0", "gpu-1")


def test_a_failed_pools_series_comes_with_the_failure_and_goes_with_the_recovery() -> None:
    metrics = OperatorMetrics()
    labels = {"specdeploy_namespace": NS, "specdeploy_deployment": "a"}

    metrics.known([failing("a", ("gpu-0", Profiling.FAILED), ("gpu-1", Profiling.FAILED))])
    both = [
        value(metrics, "profiling_failed", **labels, specdeploy_pool=f"gpu-{i}") for i in (0, 1)
    ]
    metrics.known([failing("a", ("gpu-0", Profiling.READY), ("gpu-1", Profiling.FAILED))])

    assert both == [1.0, 1.0]
    gone = metrics.registry.get_sample_value(
        "specdeploy_operator_profiling_failed", {**labels, "specdeploy_pool": "gpu-0"}
    )
    assert gone is None
    assert value(metrics, "profiling_failed", **labels, specdeploy_pool="gpu-1") == 1.0


def with_pools(name: str, **states: str) -> dict[str, Any]:
    pools = [{"gpuType": gpu.replace("_", "-"), "state": st} for gpu, st in states.items()]
    return {"metadata": {"namespace": NS, "name": name}, "spec": {}, "status": {"pools": pools}}


def test_each_pools_state_is_one_series_that_moves_with_the_state() -> None:
    metrics = OperatorMetrics()
    labels = {"specdeploy_namespace": NS, "specdeploy_deployment": "a", "specdeploy_pool": "gpu-0"}

    metrics.known([with_pools("a", gpu_0="Profiling", gpu_1="Ready")])
    profiling = value(metrics, "pool_state", **labels, state="Profiling")
    metrics.known([with_pools("a", gpu_0="Ready")])

    assert profiling == 1.0
    assert value(metrics, "pool_state", **labels, state="Ready") == 1.0
    old = metrics.registry.get_sample_value(
        "specdeploy_operator_pool_state", {**labels, "state": "Profiling"}
    )
    gone = metrics.registry.get_sample_value(
        "specdeploy_operator_pool_state", {**labels, "specdeploy_pool": "gpu-1", "state": "Ready"}
    )
    assert old is None and gone is None
    assert pool_states([with_pools("b", gpu_0="")]) == set()  # no state yet: no series


def with_floor(
    state: str, ratio: tuple[float, float, float] | None, canary_at: str | None = None
) -> dict[str, Any]:
    floor: dict[str, Any] = {"state": state}
    if canary_at:
        floor["canaryAt"] = canary_at
    if ratio is not None:
        floor.update(zip(("ratio", "ratioLow", "ratioHigh"), ratio, strict=True))
    body = with_pools("a", gpu_0="Ready")
    body["status"]["pools"][0]["floor"] = floor
    return body


def test_the_live_floor_state_and_r_follow_the_pool_from_speculating_to_plain() -> None:
    metrics = OperatorMetrics()
    labels = {"specdeploy_namespace": NS, "specdeploy_deployment": "a", "specdeploy_pool": "gpu-0"}

    metrics.known([with_floor("speculating", (0.91, 0.88, 0.94))])
    speculating = value(metrics, "pool_floor_state", **labels, state="speculating")
    pool_high = value(metrics, "pool_live_ratio", **labels, source="pool", bound="high")
    metrics.known([with_floor("plain", (0.91, 0.88, 0.94))])  # flipped: still the pool's R
    flipped = value(metrics, "pool_live_ratio", **labels, source="pool", bound="high")
    metrics.known([with_floor("plain", (1.2, 1.1, 1.3), canary_at="2026-12-06T10:00:00Z")])

    assert (speculating, pool_high, flipped) == (1.0, 0.94, 0.94)
    assert value(metrics, "pool_floor_state", **labels, state="plain") == 1.0
    assert value(metrics, "pool_live_ratio", **labels, source="canary", bound="low") == 1.1
    stale = [
        metrics.registry.get_sample_value(
            "specdeploy_operator_pool_floor_state", {**labels, "state": "speculating"}
        ),
        metrics.registry.get_sample_value(
            "specdeploy_operator_pool_live_ratio", {**labels, "source": "pool", "bound": "estimate"}
        ),
    ]
    assert stale == [None, None]  # the speculating state's series went with it
    metrics.known([with_floor("plain", None)])  # no R: the state only
    assert value(metrics, "pool_floor_state", **labels, state="plain") == 1.0
    assert (
        metrics.registry.get_sample_value(
            "specdeploy_operator_pool_live_ratio", {**labels, "source": "canary", "bound": "low"}
        )
        is None
    )
    metrics.known([with_pools("a", gpu_0="Ready")])  # no floor recorded: no series
    assert value(metrics, "pool_floor_state", **labels, state="plain") == 0.0


def test_the_telemetry_interval_is_the_longest_among_the_deployments_read() -> None:
    metrics = OperatorMetrics()
    fast, slow = deployment("a", 1), deployment("b", 1)
    fast["spec"]["telemetry"]["interval"] = "15s"
    slow["spec"]["telemetry"]["interval"] = "2m"

    tick(FakePrometheus(), metrics, fast, slow)
    longest = value(metrics, "telemetry_interval_seconds")
    tick(FakePrometheus(), metrics)  # nothing read any more

    assert longest == 120.0
    assert value(metrics, "telemetry_interval_seconds") == 0.0


# --- the flag ----------------------------------------------------------------------


def test_the_cli_default_is_the_operators_and_zero_turns_the_endpoint_off() -> None:
    argv = ["operator", "run"]
    assert DEFAULT_METRICS_PORT == DEFAULT_PORT
    assert build_parser(argv).parse_args(argv).metrics_port == DEFAULT_PORT
    off = [*argv, "--metrics-port=0"]
    assert build_parser(off).parse_args(off).metrics_port == 0
    assert main.serve_metrics(0).registry is not None  # nothing bound


def test_a_port_out_of_range_is_refused_by_the_cli() -> None:
    argv = ["operator", "run", "--metrics-port=70000"]
    with pytest.raises(SystemExit):
        build_parser(argv).parse_args(argv)


def test_a_taken_port_stops_the_start_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match="--metrics-port"):
            main.serve_metrics(port, "127.0.0.1")
