"""The fleet's status as the demo prints it: read from the API server and Prometheus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from e2e.demo import table
from e2e.localcluster import prometheus
from e2e.localcluster.kubeapi import KubeApi
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]


def samples(prometheus_url: str) -> dict[str, dict[str, float]]:
    """Every ``table.QUERIES`` query, by pool; a query that fails or is empty gives {}."""
    out: dict[str, dict[str, float]] = {}
    for name, promql in table.QUERIES.items():
        try:
            out[name] = table.by_pool(prometheus.instant_query(prometheus_url, promql))
        except (OSError, RuntimeError, ValueError):
            out[name] = {}
    return out


def status_rows(api: KubeApi, namespace: str, prometheus_url: str) -> list[table.PoolRow]:
    """The table's rows for every SpeculativeDeployment in ``namespace``."""
    found = samples(prometheus_url)
    return [
        row
        for sdep in api.items(paths.path("SpeculativeDeployment", namespace))
        for row in table.pool_rows(sdep, found)
    ]


def example(path: Path, *, interval: str) -> Obj:
    """The example manifest with a shorter telemetry interval (the demo's one change:
    a minute-long interval would let only a few updates through in a five-minute demo)."""
    body: Obj = yaml.safe_load(path.read_text())
    body["spec"].setdefault("telemetry", {})["interval"] = interval
    return body
