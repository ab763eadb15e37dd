"""The watches' cache: reconciles read nodes, children and profiles from it (issue #18).

The fake API server of ``test_operator_k8s`` answers; "watch events" are
delivered by hand (``deliver``), as kopf's handlers would deliver them.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from specdeploy.operator.api import DEPLOYMENT_KIND
from specdeploy.operator.clients import k8s
from specdeploy.operator.clients.watch_cache import WatchCache, list_pages, slim
from specdeploy.operator.reactor import handlers
from specdeploy.operator.reactor.reconcile import reconcile_once
from specdeploy.operator.reactor.reconciler import Reconciler
from specdeploy.operator.reactor.telemetry_loop import TelemetryLoop
from specdeploy.runtime.kube import paths
from tests.unit.operator.test_operator_k8s import (
    H100,
    NS,
    FakeApi,
    cluster,
    create_example,
    finish_profiling,
    finish_rollouts,
)

Obj = dict[str, Any]
CLOCK = "2026-01-01T00:00:00Z"


def deliver(api: FakeApi, cache: WatchCache) -> None:
    """What the watches would have said by now: every kept object's current state."""
    for kind in cache.kinds:
        plural = paths.kind_of(kind).plural
        now = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in api.of(plural)}
        for namespace, name in {
            (o["metadata"].get("namespace"), o["metadata"]["name"]) for o in cache.items(kind) or []
        } - set(now):
            cache.observe(kind, {"metadata": {"namespace": namespace, "name": name}}, deleted=True)
        for body in now.values():
            cache.observe(kind, copy.deepcopy(body))


def reconcile(api: FakeApi, cache: WatchCache) -> list[tuple[str, str]]:
    """One reconcile reading ``cache``, then the events it caused; the requests it sent."""
    before = len(api.requests)
    reconcile_once(api, NS, "llama-8b-chat", clock=lambda: CLOCK, cache=cache)
    deliver(api, cache)
    return api.requests[before:]


def writes(requests: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [r for r in requests if r[0] != "GET"]


def test_from_creation_to_ready_reading_the_cache_and_then_idle_reconciles_list_no_kept_kind() -> (
    None
):
    api = cluster(H100, H100)
    create_example(api)
    cache = handlers.watched_view()
    first = reconcile(api, cache)
    listed = {path for method, path in first if method == "GET"}
    assert paths.path("Node") in listed  # the first reconcile fills the cache
    for _ in range(3):
        reconcile(api, cache)
    finish_profiling(api)
    deliver(api, cache)
    for _ in range(3):
        reconcile(api, cache)
    finish_rollouts(api)
    deliver(api, cache)
    for _ in range(3):
        reconcile(api, cache)
    body = api.get("speculativedeployments", "llama-8b-chat")
    assert body["status"]["phase"] == "Ready"

    idle = reconcile(api, cache)
    assert writes(idle) == []
    kept = {paths.path(kind, NS) for kind in cache.kinds} | {paths.path("Node")}
    assert not {path for _, path in idle} & kept
    # an event's reconcile: the deployment read fresh, and ScaledObjects (no watch keeps
    # them); HPAs from the cache; no pods (profiled)
    assert [path.rsplit("/", 1)[-1] for _, path in idle] == ["llama-8b-chat", "scaledobjects"]
    # one no event asked for (the resync, telemetry): the deployment from the cache too,
    # once the deployments are kept (the resync's re-list, or the telemetry loop's)
    cache.refresh_all(api)
    before = len(api.requests)
    reconcile_once(api, NS, "llama-8b-chat", clock=lambda: CLOCK, cache=cache, cached_body=True)
    assert [path.rsplit("/", 1)[-1] for _, path in api.requests[before:]] == ["scaledobjects"]


def test_profiling_pods_are_listed_only_while_a_job_has_not_succeeded() -> None:
    api = cluster(H100)
    create_example(api)
    cache = handlers.watched_view()
    for _ in range(2):
        reconcile(api, cache)
    pods = paths.path("Pod", NS)
    assert ("GET", pods) in reconcile(api, cache)  # the Job runs: why a pod is stuck matters
    finish_profiling(api)
    deliver(api, cache)
    reconcile(api, cache)
    assert ("GET", pods) not in reconcile(api, cache)


def test_the_same_reconciles_without_a_cache_list_every_kind_each_time() -> None:
    """The baseline the cache removes: 15 requests per idle reconcile, all Nodes among them."""
    api = cluster(H100)
    create_example(api)
    for _ in range(3):
        reconcile_once(api, NS, "llama-8b-chat", clock=lambda: CLOCK)
    before = len(api.requests)
    reconcile_once(api, NS, "llama-8b-chat", clock=lambda: CLOCK)
    idle = api.requests[before:]
    assert ("GET", paths.path("Node")) in idle
    assert len(idle) == 15


def test_an_event_before_the_first_list_is_left_to_that_list() -> None:
    cache = WatchCache({"Node": None})
    cache.observe("Node", {"metadata": {"name": "n9"}})
    assert cache.items("Node") is None
    api = cluster(H100)
    assert [n["metadata"]["name"] for n in cache.items_or_list(api, "Node")] == ["n0"]


def test_events_after_the_list_add_change_and_remove() -> None:
    api = cluster(H100)
    cache = WatchCache({"Node": None})
    cache.refresh(api, "Node")
    cache.observe("Node", {"metadata": {"name": "n1", "labels": {"a": "b"}}})
    cache.observe("Node", {"metadata": {"name": "n0"}}, deleted=True)
    assert [n["metadata"] for n in cache.items("Node") or []] == [
        {"name": "n1", "labels": {"a": "b"}}
    ]


class Interleaving(FakeApi):
    """A LIST during which watch events arrive (the answer is a snapshot taken before)."""

    def __init__(self, cache: WatchCache) -> None:
        super().__init__()
        self.cache = cache
        self.during: list[tuple[Obj, bool]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        answer = super().request(method, path, **kwargs)
        for body, deleted in self.during:
            self.cache.observe("Node", body, deleted=deleted)
        self.during = []
        return answer


def test_a_relist_keeps_what_events_said_while_it_was_in_flight() -> None:
    cache = WatchCache({"Node": None})
    api = Interleaving(cache)
    for name in ("old", "stays"):
        api.put("nodes", {"metadata": {"name": name}})
    cache.refresh(api, "Node")
    # the LIST's snapshot still has "old" and lacks "new"; the events are newer
    api.during = [({"metadata": {"name": "old"}}, True), ({"metadata": {"name": "new"}}, False)]
    cache.refresh(api, "Node")
    assert sorted(n["metadata"]["name"] for n in cache.items("Node") or []) == ["new", "stays"]


def test_a_relist_repairs_an_event_the_watch_missed() -> None:
    api = cluster(H100, H100)
    cache = WatchCache({"Node": None})
    cache.refresh(api, "Node")
    del api.objects[("nodes", None, "n1")]  # deleted while the watch was down: no event
    assert len(cache.items("Node") or []) == 2
    cache.refresh(api, "Node")
    assert [n["metadata"]["name"] for n in cache.items("Node") or []] == ["n0"]


def test_a_failed_relist_keeps_the_view() -> None:
    api = cluster(H100)
    cache = WatchCache({"Node": None})
    cache.refresh(api, "Node")

    class Down:
        def request(self, *args: Any, **kwargs: Any) -> Obj:
            raise k8s.ApiError("GET", "/api/v1/nodes", 503, "{}")

    with pytest.raises(k8s.ApiError):
        cache.refresh(Down(), "Node")
    assert len(cache.items("Node") or []) == 1
    cache.observe("Node", {"metadata": {"name": "n5"}})  # events still land after it
    assert len(cache.items("Node") or []) == 2


def test_nodes_keep_only_what_discovery_reads_and_children_lose_managed_fields() -> None:
    node: Obj = {
        "metadata": {
            "name": "n0",
            "labels": {"nvidia.com/gpu.product": H100},
            "annotations": {"big": "x" * 1000},
            "managedFields": [{"manager": "kubelet"}],
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
            "conditions": [{"type": "Ready"}],
            "images": [{"names": ["x"]}],
        },
    }
    assert slim("Node", node) == {
        "kind": "Node",
        "metadata": {"name": "n0", "labels": {"nvidia.com/gpu.product": H100}},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }
    job: Obj = {"metadata": {"name": "j", "managedFields": [{}]}, "spec": {"x": 1}}
    assert slim("Job", job) == {"metadata": {"name": "j"}, "spec": {"x": 1}}
    assert "managedFields" in job["metadata"]  # the event's body is not changed


class Paged:
    def __init__(self, pages: list[list[Obj]]) -> None:
        self.pages = pages
        self.queries: list[dict[str, str]] = []

    def request(self, method: str, path: str, *, query: Any = (), **_: Any) -> Obj:
        asked = dict(query)
        self.queries.append(asked)
        index = int(asked.get("continue") or 0)
        more = {"continue": str(index + 1)} if index + 1 < len(self.pages) else {}
        return {"metadata": more, "items": self.pages[index]}


def test_lists_are_read_a_page_at_a_time() -> None:
    api = Paged([[{"n": 1}, {"n": 2}], [{"n": 3}]])
    assert list_pages(api, "/api/v1/nodes", "a=b", page=2) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert api.queries == [
        {"limit": "2", "labelSelector": "a=b"},
        {"limit": "2", "labelSelector": "a=b", "continue": "1"},
    ]


class NoKeda(FakeApi):
    def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        if "scaledobjects" in path:
            self.requests.append((method, path))
            raise k8s.ApiError(method, path, 404, '{"reason": "NotFound"}')
        return super().request(method, path, **kwargs)


def test_without_keda_scaledobjects_are_asked_once_per_resync_not_per_reconcile() -> None:
    api = NoKeda()
    api.put("nodes", {"metadata": {"name": "n0"}})
    create_example(api)
    cache = handlers.watched_view()

    def asked() -> int:
        return sum("scaledobjects" in path for _, path in api.requests)

    for _ in range(3):
        k8s.gather(api, NS, "llama-8b-chat", cache=cache)
    assert asked() == 1
    cache.refresh_all(api)  # the resync: KEDA may have been installed since
    k8s.gather(api, NS, "llama-8b-chat", cache=cache)
    assert asked() == 2


class Refuses:
    def request(self, *args: Any, **kwargs: Any) -> Obj:
        raise AssertionError("read from the cache, not the API")


def test_the_telemetry_loop_and_the_fan_out_read_deployments_from_the_cache() -> None:
    """Every 5 s the telemetry loop listed every deployment (500 bodies), and every profile
    event re-listed its namespace's deployments; both read the watches' view now."""

    api = cluster(H100)
    create_example(api)
    cache = handlers.watched_view()
    cache.refresh_all(api)

    async def nothing(*_: Any) -> None:
        return None

    loop = TelemetryLoop(api=Refuses(), deliver=nothing, cache=cache)
    assert [b["metadata"]["name"] for b in loop._list()] == ["llama-8b-chat"]
    reconciler = Reconciler(api=Refuses(), cache=cache)
    assert reconciler._deployments(NS) == [(NS, "llama-8b-chat")]
    assert reconciler._deployments("elsewhere") == []


def test_a_scaledobject_written_after_the_404_is_listed_again_at_once() -> None:
    """KEDA installed after the operator started: a ScaledObject the operator then makes
    must be seen (and pruned when the mode changes), not hidden until the resync."""
    cache = handlers.watched_view()
    cache.mark_absent("ScaledObject")
    cache.wrote(paths.path("Deployment", NS, "x"))
    assert cache.absent("ScaledObject")
    cache.wrote(paths.path("ScaledObject", NS, "x"))
    assert not cache.absent("ScaledObject")


def deployment_reads(api: FakeApi) -> int:
    return sum(
        1 for _, path in api.requests if path == paths.path(DEPLOYMENT_KIND, NS, "llama-8b-chat")
    )


def ready_with_cache() -> tuple[FakeApi, WatchCache, Reconciler]:
    api = cluster(H100)
    create_example(api)
    cache = handlers.watched_view()
    for step in (None, finish_profiling, finish_rollouts):
        if step is not None:
            step(api)
        deliver(api, cache)
        for _ in range(3):
            reconcile(api, cache)
    cache.refresh_all(api)  # what the resync does first: every kept kind synced
    reconciler = Reconciler(api=api, cache=cache, clock=lambda: CLOCK)
    return api, cache, reconciler


def test_a_resync_reconcile_reads_the_deployment_from_the_cache_once_it_holds_our_write() -> None:
    """The resync and telemetry reconciles send no request for an idle deployment (issue
    18: O(changes), not O(deployments) per resync), except right after the operator's own
    status write, until the watch has brought that write back."""
    api, cache, reconciler = ready_with_cache()
    before = deployment_reads(api)
    asyncio.run(reconciler.reconcile(NS, "llama-8b-chat", cached=True))
    assert deployment_reads(api) == before  # idle: nothing to await, the view will do

    # the operator writes the status (a user's edit changed what it reports) ...
    body = api.get("speculativedeployments", "llama-8b-chat")
    body["status"]["phase"] = "Pending"
    asyncio.run(reconciler.reconcile(NS, "llama-8b-chat"))
    written = api.get("speculativedeployments", "llama-8b-chat")["metadata"]["resourceVersion"]
    assert reconciler._awaiting[(NS, "llama-8b-chat")] == written
    # ... and before its watch event, a resync reads fresh: the view predates the write
    before = deployment_reads(api)
    asyncio.run(reconciler.reconcile(NS, "llama-8b-chat", cached=True))
    assert deployment_reads(api) == before + 1
    # once the event came, the view holds it: no read
    deliver(api, cache)
    before = deployment_reads(api)
    asyncio.run(reconciler.reconcile(NS, "llama-8b-chat", cached=True))
    assert deployment_reads(api) == before
    assert (NS, "llama-8b-chat") not in reconciler._awaiting


def test_an_event_asking_for_a_queued_resync_reconcile_makes_it_read_fresh() -> None:
    api, _, reconciler = ready_with_cache()

    async def both() -> None:
        await asyncio.gather(
            reconciler.reconcile(NS, "llama-8b-chat", cached=True),
            reconciler.reconcile(NS, "other", cached=True),
            reconciler.reconcile(NS, "llama-8b-chat"),  # an event, coalesced into the first
        )

    before = deployment_reads(api)
    asyncio.run(both())
    assert deployment_reads(api) == before + 1


def test_a_failed_reconcile_makes_the_next_one_read_fresh() -> None:
    """A reconcile that failed after writing the status (refused children go first) does not
    know the version it wrote: the next one reads the deployment."""
    _, _, reconciler = ready_with_cache()
    reconciler._awaiting[(NS, "llama-8b-chat")] = ""
    assert not reconciler._view_holds_own_write((NS, "llama-8b-chat"))
    reconciler.forget(NS, "llama-8b-chat")
    assert reconciler._view_holds_own_write((NS, "llama-8b-chat"))
