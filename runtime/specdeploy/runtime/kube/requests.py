"""An API call and its answer as plain values. Pure.

A request is built as a value before a separate step sends it (the
lightkube habit): the operator's ``plan`` returns the requests of one
reconcile, so "nothing to change writes nothing" is a property of a pure
function, and the profiler's writer builds each of its calls the same way.
``Client.exchange`` and ``Client.request`` send them.

The content types are the four the API server reads from specdeploy: plain
JSON, JSON merge patch (status), JSON patch (guarded owner-reference edits:
a list of operations) and server-side apply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["APPLY_PATCH", "JSON", "JSON_PATCH", "MERGE_PATCH", "Query", "Request", "Response"]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply; the body is sent as JSON, which is YAML too."""

Query = Mapping[str, str] | Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Request:
    """One API call. ``ok`` lists statuses that mean "already so" (404 on delete, 409 on create)."""

    method: str
    path: str
    what: str = ""
    """What the call does, for the log ("apply Deployment x")."""
    body: Any = None
    content_type: str = JSON
    query: tuple[tuple[str, str], ...] = ()
    ok: tuple[int, ...] = field(default=())


@dataclass(frozen=True)
class Response:
    """One answer, whatever its status: for callers that decide on every status themselves."""

    status: int
    body: dict[str, Any]

    @classmethod
    def of(cls, status: int, raw: bytes) -> Response:
        """Decode an answer; a body that is not a JSON object becomes its ``message``."""
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            return cls(status, {"message": raw[:200].decode("utf-8", errors="replace")})
        return cls(status, value if isinstance(value, dict) else {})

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def message(self) -> str:
        """The API's own explanation (a Status object's ``message``), or the status."""
        text = self.body.get("message")
        return f"HTTP {self.status}: {text}" if text else f"HTTP {self.status}"
