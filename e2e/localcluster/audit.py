"""The API server's audit log: its policy, counting writes by client, and the operator's rights.

The local API server logs every write at Metadata level (who, verb, object,
no bodies; ``POLICY``), so a benchmark can count what a client wrote between
two times without instrumenting the client: the operator (user agent
``specdeploy``, as the profiler's) is told apart from the harness's own
client (``kubeapi.HARNESS_USER_AGENT``) and the profiler (its ServiceAccount).

The operator's own ServiceAccount (``identity.USER``), and the chart's two
(release ``specdeploy`` in ``specdeploy-system``: the operator's and its CRD
hook's, ``e2e/tests/cluster/test_helm_install.py``), are logged for every
verb, reads and watches too, so the log proves least privilege both ways:
no request of the operator's was refused (``refused``), and every verb its
ClusterRole grants was used (``unused_grants``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users:
  - system:serviceaccount:specdeploy-system:specdeploy-operator
  - system:serviceaccount:specdeploy-system:specdeploy-operator-namespaced
  - system:serviceaccount:specdeploy-system:specdeploy
  - system:serviceaccount:specdeploy-system:specdeploy-crd-upgrade
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


def write_policy(path: Path) -> Path:
    path.write_text(POLICY)
    return path


@dataclass(frozen=True)
class Write:
    """One audited write (the ResponseComplete event)."""

    at: datetime
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user: str
    user_agent: str
    code: int

    @property
    def what(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub}"


def _events(path: Path, *, watches_started: bool = False) -> Iterator[dict[str, Any]]:
    """The completed requests in one log file (a line being written is skipped).

    ``watches_started``: a watch as soon as it started too, once (a watch completes
    only when it ends, minutes later, or never before the log is read).
    """
    if not path.is_file():
        return
    started: set[str] = set()
    with path.open() as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            stage = event.get("stage")
            if watches_started and event.get("verb") == "watch":
                if event.get("auditID") not in started:
                    started.add(event.get("auditID", ""))
                    yield event
            elif stage == "ResponseComplete":
                yield event


def _at(event: dict[str, Any]) -> datetime:
    """When the API server finished (or, for a watch, started) the request, in UTC."""
    return datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))


def read_writes(path: Path) -> Iterator[Write]:
    """Every completed write in the audit log (rotated backups are not read)."""
    for event in _events(path):
        if event.get("verb") in WRITE_VERBS:
            ref = event.get("objectRef") or {}
            yield Write(
                at=_at(event),
                verb=event["verb"],
                resource=ref.get("resource", ""),
                subresource=ref.get("subresource", ""),
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                user=(event.get("user") or {}).get("username", ""),
                user_agent=event.get("userAgent", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
            )


OPERATOR_USER_AGENT = "specdeploy"


def is_operator(write: Write, operator_user: str) -> bool:
    """A write the operator made: its user and its client's user agent."""
    return write.user == operator_user and write.user_agent == OPERATOR_USER_AGENT


def count(writes: Iterator[Write] | list[Write]) -> Counter[str]:
    return Counter(w.what for w in writes)


@dataclass(frozen=True)
class Request:
    """One completed request of any verb, as far as RBAC sees it."""

    at: datetime
    verb: str
    group: str
    resource: str
    """With its subresource after a slash (``deployments/status``), as RBAC rules name it."""
    namespace: str
    code: int
    forbidden_by_rbac: bool
    """Refused by the authorizer (a quota's 403 comes from admission and is not counted)."""


def log_files(path: Path) -> list[Path]:
    """The rotated backups (oldest first), then the live log."""
    backups = sorted(path.parent.glob(f"{path.stem}-*{path.suffix}"))
    return [*backups, path]


def requests_of(path: Path, user: str) -> Iterator[Request]:
    """Every resource request ``user`` made, over the live log and its backups."""
    for file in log_files(path):
        for event in _events(file, watches_started=True):
            ref = event.get("objectRef")
            if (event.get("user") or {}).get("username") != user or not ref:
                continue
            sub = ref.get("subresource", "")
            decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
            request = Request(
                at=_at(event),
                verb=event.get("verb", ""),
                group=ref.get("apiGroup", ""),
                resource=ref.get("resource", "") + (f"/{sub}" if sub else ""),
                namespace=ref.get("namespace", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
                forbidden_by_rbac=decision == "forbid",
            )
            yield request
            if request.verb == "patch" and request.code == 201:
                # an apply that created the object: the API server checked "create" too
                # (inside the PATCH, so no request of its own records it)
                yield replace(request, verb="create")


def refused(requests: Iterator[Request] | list[Request]) -> list[Request]:
    """The requests RBAC refused."""
    return [r for r in requests if r.forbidden_by_rbac]


Grant = tuple[str, str, str]
"""(API group, resource, verb) as a ClusterRole grants it."""


def grants(role: dict[str, Any]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in role.get("rules", [])
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def unused_grants(role: dict[str, Any], requests: Iterator[Request] | list[Request]) -> set[Grant]:
    """What ``role`` grants that no request in ``requests`` used."""
    used = {(r.group, r.resource, r.verb) for r in requests}
    return grants(role) - used
