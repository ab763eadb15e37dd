"""The PromQL client and the loop's fetch against a fake Prometheus: batched, bounded, no crash."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from specdeploy.operator.clients.prometheus import PromClient
from specdeploy.operator.reactor.telemetry_loop import TelemetryLoop, due_groups
from specdeploy.operator.telemetry.queries import Target, build_queries
from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.operator.telemetry.vector import PrometheusError, Query
from specdeploy.operator.telemetry.window import FetchProblem
from tests.unit.operator.telemetry.fake_prometheus import FakePrometheus, row, serving

POOL = {"namespace": "inference", "specdeploy_deployment": "chat"}


def canned() -> dict[str, list[dict[str, Any]]]:
    pools = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S")
    by_position = [
        row(1000 / p, {**POOL, "specdeploy_pool": pool, "position": str(p)})
        for pool in pools
        for p in range(1, 6)
    ]
    return {
        "draft_positions_reached": by_position,
        "accepted_tokens": [{**r, "value": [r["value"][0], "500"]} for r in by_position],
        "timestamp(": [row(999_990.0, {**POOL, "specdeploy_pool": pool}) for pool in pools],
    }


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coro())  # type: ignore[arg-type]


class NoApi:
    def request(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise AssertionError("the fetch must not touch the API server")


def loop_for(url: str | None = None, **settings: Any) -> TelemetryLoop:
    async def deliver(*_: Any) -> None:
        raise AssertionError("fetch delivers nothing")

    return TelemetryLoop(api=NoApi(), deliver=deliver, default_url=url,
                         settings=TelemetrySettings(**settings))  # fmt: skip


def test_three_pools_five_positions_cost_seventeen_queries_not_one_per_pool_and_position() -> None:
    fake = FakePrometheus(answers=canned())

    async def go() -> Any:
        async with serving(fake) as url, aiohttp.ClientSession() as session:
            return await loop_for().fetch(session, url, 60.0, [("inference", "chat")])

    reports = run(go)
    assert len(fake.queries) == len(build_queries([Target("inference", "chat")], 60.0)) == 17
    report = reports[("inference", "chat")]
    assert report.problem is None
    assert set(report.windows) == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"}
    h100 = report.windows["NVIDIA-H100-80GB-HBM3"]
    assert h100.reached[:5] == pytest.approx((1000, 500, 1000 / 3, 250, 200))
    assert h100.accepted[:2] == (500, 500)
    assert h100.age_seconds == pytest.approx(10.0)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        pytest.param("html", FetchProblem.BAD_RESPONSE, id="html"),
        pytest.param("huge", FetchProblem.BAD_RESPONSE, id="over-the-size-bound"),
        pytest.param("503", FetchProblem.UNREACHABLE, id="503"),
        pytest.param("slow", FetchProblem.UNREACHABLE, id="past-the-deadline"),
    ],
)
def test_a_misbehaving_prometheus_is_a_report_with_its_problem_for_every_deployment(
    mode: str, problem: FetchProblem
) -> None:
    fake = FakePrometheus(answers=canned(), mode=mode)
    keys = [("inference", "chat"), ("other", "chat")]

    async def go() -> Any:
        async with serving(fake) as url, aiohttp.ClientSession() as session:
            loop = loop_for(timeout_seconds=0.5, max_response_bytes=1 << 20)
            return await loop.fetch(session, url, 60.0, keys)

    reports = run(go)
    assert set(reports) == set(keys)
    for report in reports.values():
        assert report.problem is problem
        assert report.windows == {}
        assert report.detail


def test_a_prometheus_that_is_down_is_unreachable_not_an_exception() -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    async def go() -> Any:
        async with aiohttp.ClientSession() as session:
            return await loop_for().fetch(session, url, 60.0, [("inference", "chat")])

    report = run(go)[("inference", "chat")]
    assert report.problem is FetchProblem.UNREACHABLE
    assert url.split("//")[1] in report.detail


def test_nan_and_missing_series_make_an_empty_window_not_a_crash() -> None:
    answers = {
        "draft_positions_reached": [
            row("NaN", {**POOL, "specdeploy_pool": "H100", "position": "1"})
        ],
        "timestamp(": [row(999_999.0, {**POOL, "specdeploy_pool": "H100"})],
    }

    async def go() -> Any:
        async with serving(FakePrometheus(answers=answers)) as url, aiohttp.ClientSession() as s:
            return await loop_for().fetch(s, url, 60.0, [("inference", "chat")])

    window = run(go)[("inference", "chat")].windows["H100"]
    assert window.reached[0] == 0.0 and window.sequence_steps == 0.0


def test_the_client_refuses_an_answer_over_its_bound_while_reading() -> None:
    async def go() -> None:
        async with serving(FakePrometheus(mode="huge")) as url, aiohttp.ClientSession() as s:
            client = PromClient(url, s, max_response_bytes=64 << 10)
            await client.query(Query("x", "up"))

    with pytest.raises(PrometheusError, match="bound"):
        run(go)


def body(name: str, *, url: str | None = "http://p:9090", interval: str = "60s") -> dict[str, Any]:
    telemetry = {"interval": interval, **({"prometheusURL": url} if url else {})}
    return {"metadata": {"namespace": "ns", "name": name}, "spec": {"telemetry": telemetry}}


def test_deployments_are_due_once_per_interval_and_grouped_by_prometheus_and_window() -> None:
    due: dict[tuple[str, str], float] = {}
    bodies = [body("a"), body("b"), body("c", interval="2m"), body("d", url=None)]
    first = due_groups(bodies, due, now=0.0, default_url=None)
    assert first == {
        ("http://p:9090", 60.0): [("ns", "a"), ("ns", "b")],
        ("http://p:9090", 120.0): [("ns", "c")],
    }
    assert due_groups(bodies, due, now=30.0, default_url=None) == {}
    assert due_groups(bodies, due, now=61.0, default_url=None) == {
        ("http://p:9090", 60.0): [("ns", "a"), ("ns", "b")]
    }
    # the operator's default Prometheus covers a spec without one; a deleted deployment is forgotten
    later = due_groups([body("d", url=None)], due, now=200.0, default_url="http://env:9090")
    assert later == {("http://env:9090", 60.0): [("ns", "d")]}
    assert set(due) == {("ns", "d")}


def test_an_api_outage_costs_one_warning_line_per_tick_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Chaos C2: with the API server down, every tick logged a full traceback, which read
    as a swallowed exception (invariant I7) although the loop only waited for the API."""
    from specdeploy.operator.clients import k8s

    class Down:
        def request(self, *_: Any, **__: Any) -> dict[str, Any]:
            raise ConnectionRefusedError("connection refused")

    async def deliver(*_: Any) -> None:
        raise AssertionError("nothing to deliver")

    loop = TelemetryLoop(api=Down(), deliver=deliver, default_url="http://127.0.0.1:1",
                         tick_seconds=0.01)  # fmt: skip

    async def go() -> None:
        task = asyncio.get_running_loop().create_task(loop.run())
        await asyncio.sleep(0.1)
        task.cancel()

    assert issubclass(ConnectionRefusedError, k8s.TRANSPORT_ERRORS)
    with caplog.at_level("WARNING", logger="specdeploy.operator.telemetry"):
        run(go)
    records = [r for r in caplog.records if r.name == "specdeploy.operator.telemetry"]
    assert records, "the outage is logged"
    assert all(r.levelname == "WARNING" and r.exc_info is None for r in records)
