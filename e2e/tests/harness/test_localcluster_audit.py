"""The audit log's reading: who was refused by RBAC, and which grants no request used."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from e2e import conftest as e2e_conftest
from e2e.localcluster import audit

USER = "system:serviceaccount:specdeploy-system:specdeploy-operator"


def event(verb: str, resource: str, code: int, *, user: str = USER, **extra: Any) -> str:
    ref = {"apiGroup": extra.pop("group", ""), "resource": resource, "namespace": "ns"}
    if "subresource" in extra:
        ref["subresource"] = extra.pop("subresource")
    body = {
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user},
        "objectRef": ref,
        "responseStatus": {"code": code},
        "stageTimestamp": "2026-12-01T00:00:00Z",
        **extra,
    }
    return json.dumps(body)


def test_only_the_authorizers_refusals_count_not_an_admission_403(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    forbid: dict[str, Any] = {"annotations": {"authorization.k8s.io/decision": "forbid"}}
    quota: dict[str, Any] = {"annotations": {"authorization.k8s.io/decision": "allow"}}
    log.write_text(
        "\n".join(
            [
                event("list", "secrets", 403, **forbid),
                event("create", "deployments", 403, group="apps", **quota),
                event("get", "configmaps", 200, user="someone-else", **forbid),
                '{"stage": "ResponseComp',  # a line being written
            ]
        )
    )
    refused = audit.refused(audit.requests_of(log, USER))
    assert [(r.verb, r.resource) for r in refused] == [("list", "secrets")]


def test_a_grant_no_request_used_is_reported_and_subresources_are_named_as_rbac_names_them(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    backup = tmp_path / "audit-2026-12-01T00-00-00.000.log"
    watch = json.loads(event("watch", "configmaps", 200))
    backup.write_text(json.dumps({**watch, "stage": "ResponseStarted", "auditID": "w1"}) + "\n")
    log.write_text(
        "\n".join(
            [
                event("patch", "deployments", 200, group="apps", subresource="status"),
                event("patch", "services", 201),  # an apply that created: "create" was checked
                event("patch", "secrets", 200),
            ]
        )
    )
    role = {
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["watch", "delete"]},
            {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["services", "secrets"], "verbs": ["create"]},
        ]
    }
    unused = audit.unused_grants(role, list(audit.requests_of(log, USER)))
    assert unused == {("", "configmaps", "delete"), ("", "secrets", "create")}


class _Item:
    """A collected test as ``ran_the_whole_tier`` reads one: its file and its markers."""

    def __init__(self, path: Path, *, nightly: bool = False) -> None:
        self.path, self.nightly = path, nightly

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "nightly" and self.nightly else None


def _session(ran: list[_Item], deselected: list[_Item]) -> Any:
    stash = pytest.Stash()
    stash[e2e_conftest.DESELECTED] = cast(list[pytest.Item], deselected)
    return SimpleNamespace(items=ran, config=SimpleNamespace(stash=stash))


def test_the_grants_are_judged_over_a_whole_run_or_the_per_change_tier_only() -> None:
    """A module whose every test is nightly's (the chaos matrix) is left out of the
    per-change tier: the tier still counts as whole, so its unused grants are judged; the
    nightly tier, which leaves out per-change tests, and a run of some files are not."""
    folder = (Path(e2e_conftest.__file__).parent / "tests" / "cluster").resolve()
    modules = sorted(folder.glob("test_*.py"))
    chaos = folder / "test_chaos.py"
    assert chaos in modules and len(modules) > 2  # the test can fail
    per_change = [_Item(m) for m in modules if m != chaos]
    nightly = [_Item(chaos, nightly=True), _Item(modules[0], nightly=True)]
    whole = e2e_conftest.ran_the_whole_tier
    assert whole(_session(per_change, nightly))  # make test
    assert whole(_session(per_change + nightly, []))  # pytest, no -m
    assert not whole(_session(nightly, per_change))  # make nightly
    assert not whole(_session(per_change[1:], []))  # some files
    assert not whole(_session(per_change[1:], per_change[:1]))  # -m that drops a per-change test
