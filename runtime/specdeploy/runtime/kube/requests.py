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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "APPLY_PATCH",
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "Query",
    "Request",
    "Response",
    "yaml_safe_json",
]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply; the body is sent as JSON, which is YAML too."""

Query = Mapping[str, str] | Sequence[tuple[str, str]]

_NOT_YAML_PRINTABLE = re.compile("[\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")
"""What a YAML parser refuses raw in a document (YAML's printable set excludes them)."""


def yaml_safe_json(body: object) -> bytes:
    """``body`` as JSON that the API server's YAML decoder reads back unchanged.

    The apply body is decoded as YAML. Python's default JSON writes a character
    beyond U+FFFF as a pair of surrogate escapes (🤖 as ``\\ud83e\\udd16``),
    which that decoder refuses ("found invalid Unicode character escape code"),
    so every apply of an object carrying one failed (found by the fuzzer). Here
    such characters go raw as UTF-8, and only what YAML cannot hold raw (DEL,
    C1 controls, lone surrogates, U+FFFE/U+FFFF) is escaped, each as one BMP escape.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    escaped = _NOT_YAML_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return escaped.encode("utf-8")


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
