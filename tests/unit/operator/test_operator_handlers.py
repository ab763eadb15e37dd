"""The kopf layer: event handlers only (kopf writes nothing of its own), serialised reconciles."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from specdeploy.operator import handlers, k8s
from specdeploy.operator.reconcile import Result


class NoApi:
    def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("the reconcile is replaced in these tests")


def registry() -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()
    handlers.register(reg, handlers.Reconciler(api=NoApi()), resync_seconds=60)
    return reg


def test_only_event_handlers_are_registered_so_kopf_adds_no_finalizer_or_annotation() -> None:
    """kopf's registries are private (kopf < 2 keeps them); the cluster test checks the
    effect for real: the SpeculativeDeployment carries no finalizer and no kopf annotation."""
    reg = registry()
    assert reg._changing.get_all_handlers() == []
    assert reg._spawning.get_all_handlers() == []
    watched = {h.id.rpartition(".")[2] for h in reg._watching.get_all_handlers()}
    children = {"child-jobs", "child-deployments", "child-configmaps", "child-services"}
    assert watched == {"deployment_event", "profile_event", "node_event", *children}


def test_children_are_watched_through_the_managed_by_label() -> None:
    watched = [h for h in registry()._watching.get_all_handlers() if h.id.startswith("child-")]
    assert {h.id for h in watched} == {
        "child-jobs",
        "child-deployments",
        "child-configmaps",
        "child-services",
    }
    assert all(h.labels == {"app.kubernetes.io/managed-by": "specdeploy"} for h in watched)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def fake(api: Any, namespace: str, name: str, **_: Any) -> Result:
        seen.append((namespace, name))
        import time

        time.sleep(0.05)
        return Result((), None)

    monkeypatch.setattr(handlers, "reconcile_once", fake)
    return seen


def test_a_burst_of_events_for_one_deployment_coalesces(calls: list[tuple[str, str]]) -> None:
    async def burst() -> None:
        r = handlers.Reconciler(api=NoApi())
        await asyncio.gather(*(r.reconcile("ns", "a") for _ in range(10)))

    asyncio.run(burst())
    assert 1 <= len(calls) <= 2


def test_different_deployments_are_reconciled_independently(calls: list[tuple[str, str]]) -> None:
    async def both() -> None:
        r = handlers.Reconciler(api=NoApi())
        await asyncio.gather(r.reconcile("ns", "a"), r.reconcile("ns", "b"))

    asyncio.run(both())
    assert sorted(calls) == [("ns", "a"), ("ns", "b")]


def test_a_failed_reconcile_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Result:
        attempts.append(1)
        if len(attempts) == 1:
            raise k8s.ApiError("GET", "/x", 503, "{}")
        return Result((), None)

    monkeypatch.setattr(handlers, "reconcile_once", flaky)

    async def run() -> None:
        r = handlers.Reconciler(api=NoApi(), retry_seconds=0.01)
        await r.reconcile("ns", "a")
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert len(attempts) == 2


def test_only_a_change_discovery_reads_makes_a_node_event_count() -> None:
    r = handlers.Reconciler(api=NoApi())
    node = {
        "metadata": {"labels": {"nvidia.com/gpu.product": "H100"}},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }
    assert r.node_changed("n1", node)
    assert not r.node_changed("n1", {**node, "status": {**node["status"], "conditions": []}})
    assert r.node_changed("n1", None)
