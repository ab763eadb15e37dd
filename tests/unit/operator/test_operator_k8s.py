"""The I/O layer against an in-memory API server: gather, send, and the whole reconcile loop.

The seam is the operator's own ``k8s.Api``: the fake below answers it. The
raw transport under the real client (urllib3's connection pools) is made to
explode, so nothing here can reach a network, and a test that built a real
client by mistake fails loudly.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import urllib3
import yaml

from specdeploy.operator.clients import k8s
from specdeploy.operator.manifests import merge_patch
from specdeploy.operator.reactor.reconcile import reconcile_once
from specdeploy.runtime.kube.requests import JSON_PATCH, Request
from tests.paths import ROOT

NS = "inference"
H100 = "NVIDIA-H100-80GB-HBM3"
Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a unit test must not open a connection")

    monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "urlopen", explode)


class FakeApi:
    """A tiny API server: objects by (plural, namespace, name), the verbs the operator uses."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        self.requests: list[tuple[str, str]] = []
        self._rv = itertools.count(1)

    # -- helpers for tests --
    def put(self, plural: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(plural, meta.get("namespace"), meta["name"])] = obj
        return obj

    def get(self, plural: str, name: str, namespace: str | None = NS) -> Obj:
        return self.objects[(plural, namespace, name)]

    def of(self, plural: str) -> list[Obj]:
        return [o for (p, _, _), o in sorted(self.objects.items()) if p == plural]

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    # -- the Api protocol --
    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Sequence[tuple[str, str]] = (),
    ) -> Obj:
        self.requests.append((method, path))
        plural, namespace, name, sub = _parse(path)
        key = (plural, namespace, name or "")
        if method == "GET" and name is None:
            selector = dict(query).get("labelSelector")
            items = self._list(plural, namespace, selector)
            # Like the real server: items of a List carry no apiVersion or kind.
            return {"items": [_without_type(o) for o in items]}
        if method == "POST":
            return self._create(plural, namespace, copy.deepcopy(body))
        existing = self.objects.get(key)
        if existing is None and not (method == "PATCH" and "apply" in content_type):
            raise k8s.ApiError(method, path, 404, '{"reason": "NotFound"}')
        if method == "GET":
            return copy.deepcopy(existing or {})
        if method == "DELETE":
            del self.objects[key]
            return {}
        return self._patch(key, existing, body, content_type, sub)

    def _list(self, plural: str, namespace: str | None, selector: str | None) -> Iterator[Obj]:
        wanted = dict(part.split("=", 1) for part in selector.split(",")) if selector else {}
        for (p, ns, _), obj in sorted(self.objects.items()):
            labels = obj["metadata"].get("labels") or {}
            in_scope = p == plural and (namespace is None or ns == namespace)
            if in_scope and all(labels.get(k) == v for k, v in wanted.items()):
                yield obj

    def _create(self, plural: str, namespace: str | None, body: Obj) -> Obj:
        meta = body["metadata"]
        if "name" not in meta:
            meta["name"] = meta.pop("generateName") + str(next(self._rv))
        if (plural, namespace, meta["name"]) in self.objects:
            raise k8s.ApiError("POST", plural, 409, '{"reason": "AlreadyExists"}')
        return self.put(plural, body)

    def _patch(
        self, key: Any, existing: Obj | None, body: Any, content_type: str, sub: str | None
    ) -> Obj:
        if existing is None:
            return self.put(key[0], copy.deepcopy(body))
        if content_type == JSON_PATCH:
            obj = copy.deepcopy(existing)
            for op in body:
                _json_patch_op(obj, op)
        elif sub == "status":
            obj = copy.deepcopy(existing)
            obj["status"] = _apply_merge(obj.get("status") or {}, body["status"])
        else:  # server-side apply: our fields replace ours; status and identity stay
            obj = copy.deepcopy(body)
            obj["metadata"] = {**existing["metadata"], **body["metadata"]}
            if "status" in existing:
                obj["status"] = existing["status"]
            if obj.get("spec") != existing.get("spec"):
                obj["metadata"]["generation"] = existing["metadata"]["generation"] + 1
        return self.put(key[0], obj)


def _without_type(obj: Obj) -> Obj:
    return {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _parse(path: str) -> tuple[str, str | None, str | None, str | None]:
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    namespace = None
    if parts[0] == "namespaces" and len(parts) > 2:
        namespace, parts = parts[1], parts[2:]
    return (
        parts[0],
        namespace,
        (parts[1] if len(parts) > 1 else None),
        (parts[2] if len(parts) > 2 else None),
    )


def _apply_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _apply_merge(result.get(key), value)
    return result


def _json_patch_op(obj: Obj, op: dict[str, Any]) -> None:
    *parents, last = [p for p in op["path"].split("/")[1:]]
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if op["op"] == "test":
        actual = node[int(last)] if isinstance(node, list) else node.get(last)
        if actual != op["value"]:
            raise k8s.ApiError("PATCH", op["path"], 422, '{"reason": "Invalid"}')
    elif op["op"] == "add" and isinstance(node, list):
        node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
    elif op["op"] == "add":
        node[last] = op["value"]
    elif op["op"] == "remove":
        del node[int(last) if isinstance(node, list) else last]


# --- fixtures --------------------------------------------------------------


def cluster(*gpus: str) -> FakeApi:
    api = FakeApi()
    for i, gpu in enumerate(gpus):
        labels = {"nvidia.com/gpu.product": gpu}
        api.put(
            "nodes",
            {
                "metadata": {"name": f"n{i}", "labels": labels},
                "status": {"capacity": {"nvidia.com/gpu": "8"}},
            },
        )
    return api


def create_example(api: FakeApi, name: str = "llama-8b-chat") -> Obj:
    body: Obj = yaml.safe_load((ROOT / "examples" / "specdeploy.yaml").read_text())
    body["metadata"].update(name=name, namespace=NS)
    return api.put("speculativedeployments", body)


def event_reasons(api: FakeApi) -> list[str]:
    events = sorted(api.of("events"), key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [e["reason"] for e in events]


def reconcile(api: FakeApi, name: str = "llama-8b-chat") -> list[tuple[str, str]]:
    """One reconcile; the writes it made."""
    before = len(api.requests)
    reconcile_once(api, NS, name, clock=lambda: "2026-01-01T00:00:00Z")
    return [r for r in api.requests[before:] if r[0] != "GET"]


def settle(api: FakeApi, name: str = "llama-8b-chat", limit: int = 5) -> int:
    """Reconcile until a pass writes nothing; return the passes that wrote."""
    for passes in range(limit):
        if not reconcile(api, name):
            return passes
    raise AssertionError(f"still writing after {limit} reconciles")


def finish_profiling(api: FakeApi) -> None:
    """What the profiler Job does: write its profile, then complete."""
    for job in api.of("jobs"):
        env = {
            e["name"]: e.get("value")
            for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        doc: Obj = yaml.safe_load((ROOT / "examples" / "profile-example.yaml").read_text())
        annotation = job["metadata"]["annotations"]["specdeploy.io/fingerprint"]
        doc["spec"]["fingerprint"] = yaml.safe_load(annotation)
        doc["metadata"] = {"name": env["SPECDEPLOY_PROFILE_NAME"], "namespace": NS}
        api.put("speculationprofiles", doc)
        job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}


def finish_rollouts(api: FakeApi) -> None:
    for dep in api.of("deployments"):
        n = dep["spec"]["replicas"]
        gen = dep["metadata"]["generation"]
        dep["status"] = {
            "observedGeneration": gen,
            "replicas": n,
            "updatedReplicas": n,
            "readyReplicas": n,
        }


# --- the loop --------------------------------------------------------------


def test_a_reconcile_with_nothing_to_change_sends_no_write() -> None:
    api = cluster(H100)
    create_example(api)
    assert settle(api) >= 1
    before = len(api.requests)
    assert reconcile(api) == []
    assert all(method == "GET" for method, _ in api.requests[before:])


def test_from_creation_to_ready_through_profiling() -> None:
    api = cluster(H100, "NVIDIA-A100-SXM4-80GB")
    create_example(api)
    settle(api)
    assert len(api.of("jobs")) == 2
    assert api.get("speculativedeployments", "llama-8b-chat")["status"]["phase"] == "Profiling"
    finish_profiling(api)
    settle(api)
    assert api.of("jobs") == [], "finished Jobs are cleaned up once their profile is stored"
    assert len(api.of("deployments")) == 2
    finish_rollouts(api)
    settle(api)
    status = api.get("speculativedeployments", "llama-8b-chat")["status"]
    assert status["phase"] == "Ready"
    assert [p["state"] for p in status["pools"]] == ["Ready", "Ready"]
    assert reconcile(api) == []


def test_a_second_deployment_with_the_same_fingerprint_creates_no_job() -> None:
    api = cluster(H100)
    create_example(api)
    settle(api)
    create_example(api, "llama-copy")
    settle(api, "llama-copy")
    jobs = api.of("jobs")
    assert len(jobs) == 1
    assert sorted(r["name"] for r in jobs[0]["metadata"]["ownerReferences"]) == [
        "llama-8b-chat",
        "llama-copy",
    ]


def test_a_restart_mid_profiling_duplicates_nothing() -> None:
    api = cluster(H100)
    create_example(api)
    settle(api)
    jobs = [j["metadata"]["uid"] for j in api.of("jobs")]
    # A fresh operator process knows nothing: it only re-reads the cluster.
    assert reconcile(api) == []
    assert [j["metadata"]["uid"] for j in api.of("jobs")] == jobs


def test_events_are_written_on_transitions_only() -> None:
    api = cluster(H100)
    create_example(api)
    settle(api)
    assert event_reasons(api) == ["Profiling", "PoolProfiling"]
    finish_profiling(api)
    settle(api)
    finish_rollouts(api)
    settle(api)
    assert event_reasons(api)[2:] == [
        "RollingOut",
        "PoolRollingOut",
        "Ready",
        "PoolReady",
    ]


def test_a_deleted_deployment_is_left_to_garbage_collection() -> None:
    api = cluster(H100)
    create_example(api)
    settle(api)
    del api.objects[("speculativedeployments", NS, "llama-8b-chat")]
    assert reconcile(api) == []


# --- send ------------------------------------------------------------------


class Refusing:
    def __init__(self, status: int) -> None:
        self.status = status

    def request(self, method: str, path: str, **_: Any) -> Obj:
        raise k8s.ApiError(method, path, self.status, "{}")


def test_send_treats_a_delete_of_a_missing_object_as_done() -> None:
    assert k8s.send(Refusing(404), [Request("DELETE", "/x", "x", ok=(404, 409))]) == 1


def test_send_decides_again_when_a_create_finds_the_object_made_meanwhile() -> None:
    """It is not "already so": whose it is, and whether to join it, needs a fresh look."""
    with pytest.raises(k8s.RetryLater):
        k8s.send(Refusing(409), [Request("POST", "/x", "x", ok=(409,))])


def test_send_asks_to_decide_again_when_a_guarded_patch_finds_a_newer_object() -> None:
    with pytest.raises(k8s.RetryLater):
        k8s.send(
            Refusing(422),
            [Request("PATCH", "/x", "x", body=[{"op": "test"}], content_type=JSON_PATCH)],
        )


def test_send_raises_other_errors() -> None:
    with pytest.raises(k8s.ApiError):
        k8s.send(Refusing(403), [Request("POST", "/x", "x")])


def test_merge_patch_deletes_keys_that_are_gone() -> None:
    assert merge_patch({"a": 1, "b": {"c": 1, "d": 2}}, {"b": {"c": 1}}) == {
        "a": None,
        "b": {"d": None},
    }


def test_the_real_client_cannot_reach_a_network_here() -> None:
    client = k8s.connect(env={"SPECDEPLOY_KUBE_API": "http://127.0.0.1:9"})
    with pytest.raises(AssertionError, match="must not open a connection"):
        k8s.gather(client, NS, "llama-8b-chat")
