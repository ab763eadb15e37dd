"""PromQL built once per family for all pools, answers parsed into windows, bad answers refused."""

from __future__ import annotations

import json
import math

import pytest

from specdeploy.operator.telemetry.interval import IntervalError, parse_interval, promql_duration
from specdeploy.operator.telemetry.queries import (
    ACCEPTED,
    FRESHNESS,
    K0_PASS_SECONDS,
    K0_PASSES,
    REACHED,
    STEP_BATCH_SIZES,
    STEP_COUNT,
    STEP_SECONDS,
    TPOT_REQUESTS,
    TPOT_SECONDS,
    Target,
    build_queries,
    windows_from,
)
from specdeploy.operator.telemetry.vector import PrometheusError, Sample, parse_vector
from specdeploy.operator.telemetry.window import FetchProblem

ONE = [Target("inference", "llama-8b-chat")]


def test_one_query_per_family_grouped_by_pool_not_per_pool_or_position() -> None:
    queries = build_queries(ONE, 60)
    names = [q.name for q in queries]
    assert len(names) == len(set(names)) == 17
    for q in queries:
        assert "specdeploy_pool" in q.promql
        assert q.promql.startswith(
            (
                "sum by (namespace, specdeploy_deployment, specdeploy_pool",
                "max by (namespace, specdeploy_deployment, specdeploy_pool",
            )
        )
        assert 'namespace="inference"' in q.promql
        assert 'specdeploy_deployment="llama-8b-chat"' in q.promql
    reached = next(q for q in queries if q.name == REACHED).promql
    assert reached == (
        "sum by (namespace, specdeploy_deployment, specdeploy_pool, position) "
        "(increase(specdeploy_draft_positions_reached_total"
        '{namespace="inference", specdeploy_deployment="llama-8b-chat"}[60s]))'
    )


def test_many_deployments_share_the_same_queries_with_an_escaped_regex() -> None:
    targets = [Target("a", "m.one"), Target("b", "two"), Target("a", "three")]
    queries = build_queries(targets, 120)
    assert len(queries) == len(build_queries(ONE, 120))
    reached = next(q for q in queries if q.name == REACHED).promql
    assert 'namespace=~"a|b"' in reached
    assert 'specdeploy_deployment=~"m\\\\.one|three|two"' in reached
    assert "[120s]" in reached


def sample(value: float, pool: str = "H100", **labels: str) -> Sample:
    base = {"namespace": "inference", "specdeploy_deployment": "d", "specdeploy_pool": pool}
    return Sample({**base, **labels}, 1000.0, value)


def test_answers_become_one_window_per_pool_with_positions_in_order() -> None:
    answers = {
        REACHED: [
            sample(100, position="1"),
            sample(60, position="2"),
            sample(9, "A100", position="1"),
        ],
        ACCEPTED: [
            sample(60, position="1"),
            sample(30, position="2"),
            sample(3, "A100", position="1"),
        ],
        STEP_SECONDS: [sample(2.0, batch_bucket="3-4", k="3")],
        STEP_COUNT: [sample(400, batch_bucket="3-4", k="3"), sample(0, batch_bucket="1", k="1")],
        STEP_BATCH_SIZES: [sample(1500, batch_bucket="3-4", k="3")],
        FRESHNESS: [sample(990.0), sample(400.0, "A100")],
    }
    windows = windows_from(answers, window_seconds=60, max_positions=5)
    h100 = windows[("inference", "d", "H100")]
    assert h100.reached == (100.0, 60.0, 0.0, 0.0, 0.0)
    assert h100.accepted == (60.0, 30.0, 0.0, 0.0, 0.0)
    assert h100.step_times[("3-4", 3)].mean_ms == pytest.approx(5.0)
    assert ("1", 1) not in h100.step_times  # no steps, no cell
    assert h100.step_batch_sizes == {("3-4", 3): 1500.0}
    assert windows[("inference", "d", "A100")].step_batch_sizes == {}
    assert h100.age_seconds == pytest.approx(10.0)
    assert windows[("inference", "d", "A100")].age_seconds == pytest.approx(600.0)


def test_the_drafters_k0_passes_become_the_windows_per_bucket_times() -> None:
    answers = {
        K0_PASS_SECONDS: [sample(0.4, batch_bucket="9-16"), sample(1.0, batch_bucket="1")],
        K0_PASSES: [sample(200, batch_bucket="9-16"), sample(0, batch_bucket="1")],
        FRESHNESS: [sample(990.0), sample(990.0, "A100")],
    }
    windows = windows_from(answers, window_seconds=60)
    passes = windows[("inference", "d", "H100")].k0_passes
    assert passes.keys() == {"9-16"}, "a bucket without passes in the window has none"
    assert passes["9-16"].mean_ms == pytest.approx(2.0)
    assert windows[("inference", "d", "A100")].k0_passes == {}, "an n-gram pod times nothing"


def test_time_per_output_token_is_split_between_the_plain_reference_and_the_pool() -> None:
    ref = {"specdeploy_plain_reference": "true"}
    answers = {
        TPOT_SECONDS: [sample(3.0), sample(1.0, **ref), sample(2.0, "A100")],
        TPOT_REQUESTS: [sample(100), sample(25, **ref), sample(0, "A100")],
        FRESHNESS: [sample(990.0), sample(990.0, "A100")],
    }
    windows = windows_from(answers, window_seconds=60)
    h100 = windows[("inference", "d", "H100")]
    assert h100.tpot is not None and h100.tpot.mean_ms == pytest.approx(30.0)
    assert h100.reference_tpot is not None and h100.reference_tpot.mean_ms == pytest.approx(40.0)
    a100 = windows[("inference", "d", "A100")]
    assert a100.tpot is None, "no request finished: no time per token"
    assert a100.reference_tpot is None
    promql = {q.name: q.promql for q in build_queries(ONE, 60)}
    assert "specdeploy_plain_reference" in promql[TPOT_SECONDS]
    assert "request_time_per_output_token_seconds_count" in promql[TPOT_REQUESTS]


def test_a_pool_without_a_freshness_sample_has_no_window_and_unlabelled_series_are_ignored() -> (
    None
):
    answers = {
        REACHED: [sample(5, position="1"), Sample({"position": "1"}, 1000.0, 7)],
        FRESHNESS: [],
    }
    assert windows_from(answers, window_seconds=60) == {}


def vector(result: list[object]) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def test_non_finite_values_are_dropped_not_added() -> None:
    body = vector(
        [
            {"metric": {"a": "1"}, "value": [1.0, "NaN"]},
            {"metric": {"a": "2"}, "value": [1.0, "+Inf"]},
            {"metric": {"a": "3"}, "value": [1.0, "4.5"]},
        ]
    )
    samples = parse_vector(body)
    assert [s.value for s in samples] == [4.5]
    assert all(math.isfinite(s.value) for s in samples)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html><body>Sign in</body></html>", id="html-login-page"),
        pytest.param(b'{"status":"error","errorType":"bad_data","error":"x"}', id="error"),
        pytest.param(
            b'{"status":"success","data":{"resultType":"matrix","result":[]}}', id="a-matrix"
        ),
        pytest.param(b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}',
                     id="no-value"),
        pytest.param(b'{"status":"success","data":{"resultType":"vector","result":'
                     b'[{"metric":{},"value":[1,"x"]}]}}', id="not-a-number"),
        pytest.param(b"[1, 2]", id="not-an-object"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
    ],
)  # fmt: skip
def test_an_answer_that_is_not_an_instant_vector_is_a_bad_response(body: bytes) -> None:
    with pytest.raises(PrometheusError) as err:
        parse_vector(body)
    assert err.value.problem is FetchProblem.BAD_RESPONSE


@pytest.mark.parametrize(
    ("text", "seconds"), [("60s", 60.0), ("2m", 120.0), ("1h", 3600.0), ("1s", 10.0)]
)
def test_intervals_parse_and_are_bounded(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds
    assert promql_duration(seconds) == f"{int(seconds)}s"


@pytest.mark.parametrize("text", ["", "60", "1.5m", "0s", "5d", "-1s"])
def test_a_bad_interval_is_refused_by_name(text: str) -> None:
    with pytest.raises(IntervalError, match="interval"):
        parse_interval(text)
