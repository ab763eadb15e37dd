"""The kopf layer: event handlers only (kopf writes nothing of its own), serialised reconciles."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kopf
import pytest
import urllib3

from specdeploy.operator.api import DEPLOYMENT_KIND
from specdeploy.operator.clients import k8s
from specdeploy.operator.clients.watch_cache import WatchCache
from specdeploy.operator.reactor import handlers
from specdeploy.operator.reactor.reconcile import Result
from specdeploy.operator.reactor.reconciler import Reconciler


class ListsOnly:
    """An API server that answers one LIST, with ``items``."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert method == "GET"
        return {"items": self.items, "metadata": {}}


class NoApi:
    def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("the reconcile is replaced in these tests")


def registry() -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()
    handlers.register(reg, Reconciler(api=NoApi()), resync_seconds=60)
    return reg


def test_only_event_handlers_are_registered_so_kopf_adds_no_finalizer_or_annotation() -> None:
    """kopf's registries are private (kopf < 2 keeps them); the cluster test checks the
    effect for real: the SpeculativeDeployment carries no finalizer and no kopf annotation."""
    reg = registry()
    assert reg._changing.get_all_handlers() == []
    assert reg._spawning.get_all_handlers() == []
    watched = {h.id.rpartition(".")[2] for h in reg._watching.get_all_handlers()}
    children = {f"child-{plural}" for _, _, plural in handlers.CHILD_RESOURCES}
    scalers = {f"scaler-{plural}" for _, _, plural in handlers.SCALER_RESOURCES}
    assert watched == {"deployment_event", "profile_event", "node_event", *children, *scalers}


def test_every_kind_the_operator_creates_is_watched_through_the_managed_by_label() -> None:
    """Review H1: a hand-deleted RoleBinding, ServiceAccount or PDB was seen by no watch."""
    watched = [h for h in registry()._watching.get_all_handlers() if h.id.startswith("child-")]
    assert {h.id for h in watched} == {
        "child-jobs",
        "child-deployments",
        "child-configmaps",
        "child-services",
        "child-serviceaccounts",
        "child-roles",
        "child-rolebindings",
        "child-poddisruptionbudgets",
        "child-networkpolicies",
    }
    assert all(h.labels == {"app.kubernetes.io/managed-by": "specdeploy"} for h in watched)


def _run_startup(reg: kopf.OperatorRegistry) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()

    async def start() -> None:
        for handler in reg._activities.get_all_handlers():
            if handler.id.endswith(".configure"):
                configure: Any = handler.fn
                await configure(settings=settings)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    asyncio.run(start())
    return settings


def test_the_children_watches_are_narrowed_on_the_server_by_the_label() -> None:
    """Review M2: ``labels=`` on a handler filters in the client, after every object of the
    cluster has been streamed; only kopf's label_selectors reach the API as labelSelector."""
    from kopf._cogs.structs.references import Resource

    settings = _run_startup(registry())

    for group, version, plural in handlers.CHILD_RESOURCES:
        resource = Resource(group, version, plural)
        assert list(settings.watching.label_selectors.collect(resource)) == [
            "app.kubernetes.io/managed-by=specdeploy"
        ]
    unmanaged = Resource("specdeploy.io", "v1alpha1", "speculativedeployments")
    assert list(settings.watching.label_selectors.collect(unmanaged)) == []


def test_a_resync_reconciles_every_deployment_again_without_any_event(
    calls: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review H1: kopf lists once and re-watches from the last resourceVersion, so nothing
    was ever replayed; the resync lists the deployments itself."""
    monkeypatch.setattr(k8s, "list_deployments", lambda api, ns: [("ns", "a"), ("ns", "b")])

    async def run() -> None:
        r = Reconciler(api=NoApi())
        task = asyncio.get_running_loop().create_task(r.resync(0.05))
        await asyncio.sleep(0.4)
        task.cancel()

    asyncio.run(run())
    assert calls.count(("ns", "a")) >= 2
    assert calls.count(("ns", "b")) >= 2


def test_a_failed_fan_out_is_retried_not_dropped(
    calls: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review H1: a node sweep or a profile's namespace fan-out that met an outage was lost."""
    lists: list[str | None] = []

    def flaky_list(api: Any, namespace: str | None) -> list[tuple[str, str]]:
        lists.append(namespace)
        if len(lists) == 1:
            raise urllib3.exceptions.ProtocolError("connection reset")
        return [("ns", "a")]

    monkeypatch.setattr(k8s, "list_deployments", flaky_list)

    async def run() -> None:
        r = Reconciler(api=NoApi(), retry_seconds=0.01)
        await r.reconcile_namespace("ns")
        await asyncio.sleep(0.3)

    asyncio.run(run())
    assert lists == ["ns", "ns"]
    assert calls == [("ns", "a")]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def fake(api: Any, namespace: str, name: str, **_: Any) -> Result:
        seen.append((namespace, name))
        import time

        time.sleep(0.05)
        return Result((), None)

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", fake)
    return seen


def test_a_burst_of_events_for_one_deployment_coalesces(calls: list[tuple[str, str]]) -> None:
    async def burst() -> None:
        r = Reconciler(api=NoApi())
        await asyncio.gather(*(r.reconcile("ns", "a") for _ in range(10)))

    asyncio.run(burst())
    assert 1 <= len(calls) <= 2


def test_different_deployments_are_reconciled_independently(calls: list[tuple[str, str]]) -> None:
    async def both() -> None:
        r = Reconciler(api=NoApi())
        await asyncio.gather(r.reconcile("ns", "a"), r.reconcile("ns", "b"))

    asyncio.run(both())
    assert sorted(calls) == [("ns", "a"), ("ns", "b")]


@pytest.mark.parametrize(
    "error",
    [
        k8s.ApiError("GET", "/x", 503, "{}"),
        ConnectionRefusedError("refused"),
        urllib3.exceptions.ProtocolError("connection reset"),
    ],
    ids=["a-refusal", "a-refused-connection", "a-connection-lost-mid-answer"],
)
def test_a_failed_reconcile_is_retried(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    attempts: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Result:
        attempts.append(1)
        if len(attempts) == 1:
            raise error
        return Result((), None)

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", flaky)

    async def run() -> None:
        r = Reconciler(api=NoApi(), retry_seconds=0.01)
        await r.reconcile("ns", "a")
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert len(attempts) == 2


def test_only_a_change_discovery_reads_makes_a_node_event_count() -> None:
    r = Reconciler(api=NoApi())
    node = {
        "metadata": {"labels": {"nvidia.com/gpu.product": "H100"}},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }
    assert r.node_changed("n1", node)
    assert not r.node_changed("n1", {**node, "status": {**node["status"], "conditions": []}})
    assert r.node_changed("n1", None)


def test_with_a_view_of_the_deployments_only_labels_their_selectors_name_count() -> None:
    """Issue 18: while 2,000 nodes registered, the node controller's label patches each
    swept every deployment (about 9 sweeps a second for 8 minutes)."""
    cache = WatchCache({DEPLOYMENT_KIND: None, "Node": None})
    cache.refresh(
        ListsOnly(
            [
                {
                    "metadata": {"namespace": "ns", "name": "a"},
                    "spec": {"nodeSelector": {"team": "a"}},
                }
            ]
        ),
        DEPLOYMENT_KIND,
    )
    r = Reconciler(api=NoApi(), cache=cache)
    labels = {"nvidia.com/gpu.product": "H100", "team": "a"}
    node = {"metadata": {"labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    assert r.node_changed("n1", node)
    patched = {**node, "metadata": {"labels": {**labels, "kubernetes.io/os": "linux"}}}
    assert not r.node_changed("n1", patched)
    assert r.node_changed("n1", {**node, "metadata": {"labels": {**labels, "team": "b"}}})


def test_a_new_selector_key_does_not_make_every_nodes_next_heartbeat_a_change() -> None:
    """Found by the fleet bench: signatures kept with the selector keys of their time
    differed from the next heartbeat's once a deployment named a new key, so each of
    2,000 nodes swept every deployment once more, about a sweep a second."""
    cache = WatchCache({DEPLOYMENT_KIND: None, "Node": None})
    cache.refresh(ListsOnly([]), DEPLOYMENT_KIND)
    r = Reconciler(api=NoApi(), cache=cache)
    labels = {"nvidia.com/gpu.product": "H100", "nvidia.com/gpu.family": "hopper"}
    node = {"metadata": {"labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    assert r.node_changed("n1", node)
    selecting = {
        "metadata": {"namespace": "ns", "name": "a"},
        "spec": {"nodeSelector": {"nvidia.com/gpu.family": "hopper"}},
    }
    cache.observe(DEPLOYMENT_KIND, selecting)
    heartbeat = {**node, "status": {**node["status"], "conditions": [{"type": "Ready"}]}}
    assert not r.node_changed("n1", heartbeat)
    relabelled = {**node, "metadata": {"labels": {**labels, "nvidia.com/gpu.family": "x"}}}
    assert r.node_changed("n1", relabelled)
    assert r.node_changed("n1", None)
    assert not r.node_changed("n1", None)


def test_a_node_sweep_reads_the_deployments_from_the_watches_view() -> None:
    """A node event changes nothing of a deployment: its reconcile may use the cache."""
    seen: list[tuple[str | None, bool]] = []
    r = Reconciler(api=NoApi())

    async def reconcile_namespace(namespace: str | None, *, cached: bool = False) -> None:
        seen.append((namespace, cached))

    async def run() -> None:
        r.reconcile_namespace = reconcile_namespace  # type: ignore[method-assign]
        r.sweep_soon(delay=0)
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert seen == [(None, True)]


def test_kopf_logs_in_as_our_client_and_follows_a_rotated_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one\n")
    (tmp_path / "ca.crt").write_text("not read before a request")
    (tmp_path / "namespace").write_text("ops")
    env = {
        "SPECDEPLOY_KUBE_API": "https://api.example:6443",
        "SPECDEPLOY_SERVICEACCOUNT_DIR": str(tmp_path),
    }
    client = k8s.connect(env=env)
    reg = kopf.OperatorRegistry()
    handlers.register_login(reg, client.credentials)
    (handler,) = reg._activities.get_all_handlers()
    login: Any = handler.fn  # kopf passes its kwargs (logger, memo, ...); ours ignores them

    first = login()
    (tmp_path / "token").write_text("two\n")  # kopf logs in again after a 401
    second = login()

    assert first == kopf.ConnectionInfo(
        server="https://api.example:6443",
        ca_path=tmp_path / "ca.crt",
        insecure=False,
        scheme="Bearer",
        token="one",
        default_namespace="ops",
    )
    assert second.token == "two"


def test_the_namespaced_mode_scans_no_namespaces_or_crds_which_its_role_cannot_grant() -> None:
    """Seen on the local cluster: with named namespaces kopf still listed namespaces
    cluster-wide and met a 403 every few seconds."""
    reg = kopf.OperatorRegistry()
    handlers.register(reg, Reconciler(api=NoApi(), namespaces=("inference",)), resync_seconds=60)
    assert _run_startup(reg).scanning.disabled is True
    assert _run_startup(registry()).scanning.disabled is False


def test_events_during_a_backoff_wait_for_the_retry_but_a_spec_change_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the fuzzer: each event of a busy namespace re-sent a refused write at once
    (97 a minute) although the log said "retrying in 22s"."""
    attempts: list[float] = []

    def refused(*args: Any, **kwargs: Any) -> Result:
        attempts.append(1)
        raise k8s.ApiError("PATCH", "/x", 503, "{}")

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", refused)

    async def run() -> tuple[int, int]:
        r = Reconciler(api=NoApi(), retry_seconds=0.5)
        await r.reconcile("ns", "a")
        for _ in range(20):  # child, profile and node events while it backs off
            await r.reconcile("ns", "a")
            await asyncio.sleep(0.01)
        during_backoff = len(attempts)
        await r.reconcile("ns", "a", urgent=True)  # the user edited the spec
        after_edit = len(attempts)
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        return during_backoff, after_edit

    during_backoff, after_edit = asyncio.run(run())
    assert during_backoff == 1
    assert after_edit == 2


def test_only_a_new_generation_makes_a_deployment_event_urgent() -> None:
    r = Reconciler(api=NoApi())
    assert r.spec_changed(("ns", "a"), 1)
    assert not r.spec_changed(("ns", "a"), 1), "a status write of ours: same generation"
    assert r.spec_changed(("ns", "a"), 2)


def test_a_429_is_retried_no_sooner_than_the_server_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chaos C3 (review L2): a 429 with retryAfterSeconds 20 was retried after 5 s."""
    import json

    delays: list[float] = []
    busy = json.dumps({"kind": "Status", "code": 429, "details": {"retryAfterSeconds": 20}})

    def throttled(*args: Any, **kwargs: Any) -> Result:
        raise k8s.ApiError("PATCH", "/x", 429, busy)

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", throttled)

    async def run() -> None:
        r = Reconciler(api=NoApi(), retry_seconds=1.0)
        monkeypatch.setattr(r, "_retry_later", lambda key, delay: delays.append(delay))
        await r.reconcile("ns", "a")

    asyncio.run(run())
    assert delays and delays[0] >= 20.0


def synced_handlers() -> tuple[WatchCache, dict[str, Any]]:
    """A cache with every watched kind synced (empty) and the handlers registered on it,
    by handler id."""
    cache = handlers.watched_view()
    for kind in cache.kinds:
        cache.refresh(EmptyApi(), kind)
    reg = kopf.OperatorRegistry()
    handlers.register(reg, Reconciler(api=NoApi(), cache=cache), resync_seconds=60)
    return cache, {h.id.rpartition(".")[2]: h.fn for h in reg._watching.get_all_handlers()}


def test_watch_events_of_children_profiles_and_nodes_feed_the_cache(
    calls: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #18: reconciles read the watched kinds from what the watches delivered."""
    monkeypatch.setattr(k8s, "list_deployments", lambda api, ns: [])
    cache, fns = synced_handlers()
    owned = {"kind": "SpeculativeDeployment", "name": "a"}
    job = {"metadata": {"name": "j", "namespace": "ns", "ownerReferences": [owned]}}
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    profile = {"metadata": {"name": "p", "namespace": "ns"}}

    async def run() -> None:
        await fns["child-jobs"](type="ADDED", body=job, namespace="ns")
        await fns["node_event"](type="ADDED", name="n1", body=node)
        await fns["profile_event"](type="ADDED", namespace="ns", body=profile)
        assert [o["metadata"]["name"] for o in cache.items("Job", "ns") or []] == ["j"]
        assert [o["metadata"]["name"] for o in cache.items("Node") or []] == ["n1"]
        assert [o["metadata"]["name"] for o in cache.items("SpeculationProfile", "ns") or []] == [
            "p"
        ]
        await fns["child-jobs"](type="DELETED", body=job, namespace="ns")
        assert cache.items("Job", "ns") == []
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    asyncio.run(run())
    assert calls == [("ns", "a"), ("ns", "a")]  # the Job's owner, on its creation and deletion


def test_an_hpa_status_sync_reconciles_nothing_but_its_deletion_or_spec_edit_does(
    calls: list[tuple[str, str]],
) -> None:
    """Issue #18: HPAs are kept from their watch for reads; the HPA controller rewrites
    their status at every sync, which must not reconcile the owner each time."""
    cache, fns = synced_handlers()
    hpa_event = fns["scaler-horizontalpodautoscalers"]
    owned = {"kind": "SpeculativeDeployment", "name": "a"}

    def hpa(generation: int, desired: int) -> dict[str, Any]:
        meta = {
            "name": "h",
            "namespace": "ns",
            "generation": generation,
            "ownerReferences": [owned],
        }
        return {"metadata": meta, "status": {"desiredReplicas": desired}}

    async def run() -> list[int]:
        seen = []
        for event, body in (
            ("ADDED", hpa(1, 1)),  # created: its owner looks
            ("MODIFIED", hpa(1, 2)),  # the controller's sync
            ("MODIFIED", hpa(1, 3)),  # and the next
            ("MODIFIED", hpa(2, 3)),  # a hand edit of its spec: the owner restores it
            ("DELETED", hpa(2, 3)),  # deleted: the owner makes it again
        ):
            await hpa_event(type=event, body=body, namespace="ns", name="h")
            seen.append(len(calls))
        kept = cache.items("HorizontalPodAutoscaler", "ns")
        assert kept == []
        return seen

    assert asyncio.run(run()) == [1, 1, 1, 2, 3]


class EmptyApi:
    def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"items": []}


def test_a_new_deployment_is_reconciled_before_a_namespace_s_backlog(
    calls: list[tuple[str, str]],
) -> None:
    """Issue #18: at start every deployment queues at once; the one a user just created
    (a new generation: urgent) must not wait behind them."""

    async def run() -> None:
        r = Reconciler(api=NoApi(), workers=1)
        backlog = [asyncio.create_task(r.reconcile("big", f"d{i}")) for i in range(5)]
        await asyncio.sleep(0.01)
        new = asyncio.create_task(r.reconcile("team", "new", urgent=True))
        await asyncio.gather(*backlog, new)

    asyncio.run(run())
    assert calls[1] == ("team", "new")
    assert len(calls) == 6
