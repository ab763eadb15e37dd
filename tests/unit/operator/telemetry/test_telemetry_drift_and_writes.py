"""Cost drift re-profiles (the old table serving), a blip does not; writes counted per interval."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from specdeploy.operator.api import DEPLOYMENT_KIND, PROFILE_KIND
from specdeploy.operator.clients import k8s
from specdeploy.operator.manifests import ref_of
from specdeploy.operator.observed import CHILD_KINDS
from specdeploy.operator.reactor.reconcile import Result, reconcile_once
from specdeploy.operator.reactor.reconciler import Reconciler
from specdeploy.operator.telemetry.profile_live import contributions, merged_view, status_patch
from specdeploy.operator.telemetry.settings import TelemetrySettings
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import APPLY_PATCH, MERGE_PATCH
from tests.unit.operator.telemetry.fakes import (
    LATER,
    NS,
    body,
    condition,
    owned,
    pool,
    profile_doc,
    report,
    settle,
    step,
    stored,
    window,
    without_hash,
    world,
)

LOW = (0.3, 0.2, 0.1, 0.1, 0.1)


def jobs(decision: Any) -> list[str]:
    return sorted(m["metadata"]["name"] for m in decision.shared if m["kind"] == "Job")


def run_intervals(factors: list[float]) -> tuple[dict[str, Any], Any]:
    deployment, decision = settle(body())
    for factor in factors:
        deployment, decision = step(deployment, decision, report(p=window(cost_factor=factor)))
    return deployment, decision


def test_sustained_cost_drift_requests_a_reprofile_and_the_old_table_keeps_serving() -> None:
    _, calm = settle(body())
    _, drifted = run_intervals([1.3, 1.3, 1.3])
    assert jobs(calm) == [] and len(jobs(drifted)) == 1
    assert pool(drifted)["live"]["costDrift"] is True
    assert "re-profiling" in pool(drifted)["message"] and "old table" in pool(drifted)["message"]
    # the old table and the pods stay as they were
    assert owned(drifted, "ConfigMap")["data"] == owned(calm, "ConfigMap")["data"]
    assert without_hash(owned(drifted, "Deployment")) == without_hash(owned(calm, "Deployment"))
    tables = condition(drifted, "TablesCurrent")
    assert (tables["status"], tables["reason"]) == ("False", "CostDrift")
    assert any(e.reason == "CostDrift" and e.type == "Warning" for e in drifted.events)


def test_a_blip_of_slow_steps_requests_nothing() -> None:
    _, decision = run_intervals([1.3, 1.0, 1.3, 1.0, 1.3])
    assert jobs(decision) == []
    assert pool(decision)["live"]["costDrift"] is False


def test_a_reprofiled_profile_ends_the_drift_and_the_job_is_released() -> None:
    deployment, drifted = run_intervals([1.3, 1.3, 1.3])
    renewed = profile_doc(body(), generation=2)
    renewed["spec"]["measurements"][0]["itlMs"] = 6.5  # the new measurement
    _, after = step(deployment, drifted, None, profile=renewed)
    assert jobs(after) == []
    assert "live" not in pool(after)  # derived from the old content: void


# --- writes per interval, through the operator's own write path ----------------


class FakeApi:
    """The API server as a reconcile sees it: a deployment, a profile, children; writes counted."""

    def __init__(self, deployment: dict[str, Any], decision: Any) -> None:
        self.body = copy.deepcopy(deployment)
        self.profile = profile_doc(deployment)
        self.children = {ref_of(m): stored(m) for m in decision.owned + decision.shared}
        self.writes: list[tuple[str, str]] = []

    def request(self, method: str, path: str, *, body: Any = None, content_type: str = "",
                query: Any = ()) -> dict[str, Any]:  # fmt: skip
        if method == "GET":
            return self._get(path)
        self.writes.append((method, path))
        if content_type == APPLY_PATCH:
            self.children[ref_of(body)] = stored(body)
        elif content_type == MERGE_PATCH and path.endswith("/status"):
            self.body["status"] = _merged(self.body.get("status") or {}, body["status"])
        return {}

    def _get(self, path: str) -> dict[str, Any]:
        if path == paths.path(DEPLOYMENT_KIND, NS, self.body["metadata"]["name"]):
            return copy.deepcopy(self.body)
        if path == paths.path(PROFILE_KIND, NS):
            return {"items": [self.profile]}
        if path == paths.path("Node"):
            return {"items": list(world(self.body).nodes)}
        for kind in CHILD_KINDS:
            if path == paths.path(kind, NS):
                return {"items": [o for (k, _), o in self.children.items() if k == kind]}
        return {"items": []}


def _merged(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def test_writes_per_interval_one_status_and_one_table_when_changed_none_when_quiet() -> None:
    deployment, decision = settle(body())
    api = FakeApi(deployment, decision)
    name = deployment["metadata"]["name"]
    reconcile_once(api, NS, name, clock=lambda: LATER)
    assert api.writes == []  # settled: nothing to write
    reconcile_once(api, NS, name, clock=lambda: LATER, telemetry=report(p=window(LOW, k=3)))
    patched = sorted(path.split("/")[-2] for method, path in api.writes if method == "PATCH")
    assert patched == ["configmaps", name]  # the table and the status, once each
    api.writes.clear()
    for sequences in (21_000, 19_500, 20_400):  # three quiet intervals
        quiet = report(p=window((0.3, 0.2, 0.1, 0.1, 0.1), k=3, sequences=sequences))
        reconcile_once(api, NS, name, clock=lambda: LATER, telemetry=quiet)
    assert api.writes == []


# --- the profile's status.live ---------------------------------------------------


def test_the_profile_view_sums_every_pool_that_serves_with_it_and_marks_cost_drift_stale() -> None:
    a, _ = run_intervals([1.0])
    b = copy.deepcopy(a)
    b["metadata"]["name"] = "other"
    sources = contributions([a, b])
    (key,) = sources
    digest = a["status"]["pools"][0]["live"]["profileDigest"]
    view = merged_view(sources[key], digest, TelemetrySettings())
    one = a["status"]["pools"][0]["live"]
    assert view["reached"] == [2 * r for r in one["reached"]]
    assert view["sources"] == ["llama-8b-chat/NVIDIA-H100-80GB-HBM3", "other/NVIDIA-H100-80GB-HBM3"]
    profile = profile_doc(body())
    patch = status_patch(profile, view, now=LATER)
    assert patch is not None and patch["live"]["sequenceSteps"] == 2 * one["sequenceSteps"]
    profile["status"] = patch
    assert status_patch(profile, view, now="2030-01-01T00:00:00Z") is None  # unchanged: no write
    drifted, _ = run_intervals([1.3, 1.3, 1.3])
    view = merged_view(contributions([drifted])[key], digest, TelemetrySettings())
    stale = next(c for c in (status_patch(profile, view, now=LATER) or {})["conditions"])
    assert (stale["type"], stale["status"], stale["reason"]) == ("Stale", "True", "CostDrift")


# --- the handler hands the interval to exactly one reconcile -------------------------


def test_a_delivered_interval_reaches_the_reconcile_and_survives_a_failed_one(
    monkeypatch: Any,
) -> None:
    seen: list[Any] = []
    fail = [True]

    def fake(api: Any, namespace: str, name: str, **kw: Any) -> Result:
        seen.append(kw.get("telemetry"))
        if fail.pop() if fail else False:
            raise k8s.ApiError("GET", "/x", 500, "boom")
        return Result((), None)

    monkeypatch.setattr("specdeploy.operator.reactor.reconciler.reconcile_once", fake)
    reconciler = Reconciler(api=object(), retry_seconds=0.01)  # type: ignore[arg-type]
    interval = report(p=window())

    async def go() -> None:
        await reconciler.deliver(NS, "d", interval)
        await asyncio.sleep(0.1)  # the retry
        await reconciler.reconcile(NS, "d")

    asyncio.run(go())
    assert seen == [interval, interval, None]
