"""One refused write no longer blocks the rest, and retries back off (review H4, M10, H1).

At 7a48b4a a child the API server refused (a 422 for an input validation let
through) aborted the reconcile: no status write, later pools never written,
and the same write retried every 5 s forever.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import pytest

from specdeploy.operator.clients import k8s
from specdeploy.operator.reactor.reconcile import reconcile_once
from specdeploy.operator.reactor.reconciler import Reconciler
from tests.unit.operator.test_operator_k8s import (
    NS,
    FakeApi,
    cluster,
    create_example,
    finish_profiling,
)

A100, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
NOW = "2026-01-01T00:00:00Z"


class RefusingApi(FakeApi):
    """Refuses the apply of one Deployment with 422, as the API server refuses bad input."""

    def __init__(self, refuse: str) -> None:
        super().__init__()
        self.refuse = refuse

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "PATCH" and "/deployments/" in path and self.refuse in path:
            self.requests.append((method, path))
            body = '{"reason": "Invalid", "message": "spec.template: Invalid value"}'
            raise k8s.ApiError(method, path, 422, body)
        return super().request(method, path, **kwargs)


def two_pools(api: FakeApi) -> None:
    body = create_example(api)
    body["spec"]["pools"] = [{"gpuType": A100}, {"gpuType": H100}]


def test_a_refused_child_leaves_the_other_pools_written_and_the_status_saying_why() -> None:
    base = cluster(A100, H100)
    api = RefusingApi(refuse="a100")
    api.objects = base.objects
    two_pools(api)
    for _ in range(3):
        with contextlib.suppress(k8s.ChildrenRefused):
            reconcile_once(api, NS, "llama-8b-chat", clock=lambda: NOW)
        finish_profiling(api)
    with pytest.raises(k8s.ChildrenRefused) as refused:
        reconcile_once(api, NS, "llama-8b-chat", clock=lambda: NOW)
    assert "a100" in str(refused.value)
    names = [d["metadata"]["name"] for d in api.of("deployments")]
    assert any("h100" in n for n in names), "the other pool was still written"
    status = api.get("speculativedeployments", "llama-8b-chat")["status"]
    applied = next(c for c in status["conditions"] if c["type"] == "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "ChildRefused")
    assert "Invalid value" in applied["message"] and status["phase"] == "Degraded"
    assert any(e["reason"] == "ChildRefused" for e in api.of("events"))


def test_retries_back_off_per_deployment_and_reset_on_success() -> None:
    r = Reconciler(api=FakeApi(), retry_seconds=5.0, retry_max_seconds=60.0)
    key = (NS, "x")
    delays = [r._backoff(key) for _ in range(6)]
    assert 5.0 <= delays[0] <= 5.5 and 10.0 <= delays[1] <= 11.0
    assert all(b >= a * 0.9 for a, b in itertools.pairwise(delays))
    assert 60.0 <= delays[-1] <= 66.0, "capped"
    assert r._backoff((NS, "other")) <= 5.5, "per deployment"
