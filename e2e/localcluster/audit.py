"""The API server's audit log of writes: its policy, and counting writes by client.

The local API server logs every write at Metadata level (who, verb, object,
no bodies; ``POLICY``), so a benchmark can count what a client wrote between
two times without instrumenting the client: the operator (user agent
``specdeploy``, as the profiler's) is told apart from the harness's own
client (``kubeapi.HARNESS_USER_AGENT``) and the profiler (its ServiceAccount).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
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


def read_writes(path: Path) -> Iterator[Write]:
    """Every completed write in the audit log (rotated backups are not read)."""
    if not path.is_file():
        return
    with path.open() as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
                continue
            ref = event.get("objectRef") or {}
            yield Write(
                at=datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")),
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
