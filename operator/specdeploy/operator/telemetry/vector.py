"""Prometheus' instant-query answers as values: the request, the samples, the errors. Pure.

``parse_vector`` turns the body of ``/api/v1/query`` into samples, or
raises ``PrometheusError`` for anything that is not an instant vector in
Prometheus' JSON (an HTML page from a proxy, an error status, a matrix);
non-finite values (NaN from 0/0 in a rate, Inf) are dropped, since they
carry no count. The HTTP client is ``clients.prometheus``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.operator.telemetry.window import FetchProblem

QUERY_PATH = "/api/v1/query"


class PrometheusError(Exception):
    """No usable answer; ``problem``: Prometheus unreachable, or its answer unusable."""

    def __init__(self, problem: FetchProblem, message: str) -> None:
        self.problem = problem
        super().__init__(message)


@dataclass(frozen=True)
class Query:
    """One instant query: its name in the batch and its PromQL."""

    name: str
    promql: str


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector: its labels, evaluation time and value."""

    labels: Mapping[str, str]
    time: float
    value: float


def bad(message: str) -> PrometheusError:
    """An answer that is not a usable instant vector."""
    return PrometheusError(FetchProblem.BAD_RESPONSE, message)


def _sample(item: Any) -> Sample | None:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise bad("a result element without a metric object")
    pair = item.get("value")
    if not isinstance(pair, list) or len(pair) != 2:
        raise bad("a result element without a [time, value] pair")
    try:
        time, value = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise bad(f"a value that is not a number: {pair!r:.80}") from None
    if not (math.isfinite(value) and math.isfinite(time)):
        return None  # NaN (0/0 in a rate) or Inf: no count to add
    labels = {str(k): str(v) for k, v in item["metric"].items()}
    return Sample(labels, time, value)


def parse_vector(body: bytes) -> list[Sample]:
    """The samples of an instant-vector answer; PrometheusError for anything else."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        start = body[:60].decode("utf-8", "replace").strip()
        raise bad(f"not JSON (starts {start!r})") from None
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    if doc.get("status") != "success":
        raise bad(f"query failed: {doc.get('errorType', '?')}: {str(doc.get('error', ''))[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise bad(f"expected an instant vector, got {kind!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise bad("data.result is not a list")
    return [s for s in (_sample(item) for item in result) if s is not None]
