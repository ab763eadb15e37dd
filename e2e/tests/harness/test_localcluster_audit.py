"""The audit log's reading: who was refused by RBAC, and which grants no request used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
