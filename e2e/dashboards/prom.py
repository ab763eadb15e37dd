"""The three Prometheus HTTP API calls a dashboard makes, with Prometheus's own error text.

Grafana asks ``/api/v1/label/<name>/values`` for ``label_values(...)``
variables, ``/api/v1/query_range`` for time-series panels and
``/api/v1/query`` for instant ones (tables). A refused query raises
``QueryError`` with Prometheus's message (a 400's body says which part of
the PromQL is wrong), which a bare ``urlopen`` would hide behind "HTTP 400".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

Series = dict[str, Any]
"""One result series: ``metric`` (labels) and ``values`` ([t, "v"] pairs) or ``value``."""


class QueryError(RuntimeError):
    """Prometheus refused or failed a request."""


def get(base: str, path: str, params: Sequence[tuple[str, str]], timeout: float = 30) -> Any:
    """``data`` of one API answer."""
    url = f"{base.rstrip('/')}{path}?{urllib.parse.urlencode(list(params))}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            reply = json.load(response)
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace")
        raise QueryError(f"{path}: HTTP {err.code}: {body[:500]}") from None
    except urllib.error.URLError as err:
        raise QueryError(f"{base}: unreachable: {err.reason}") from None
    if reply.get("status") != "success":
        raise QueryError(f"{path}: {reply.get('error', reply)}")
    return reply["data"]


def label_values(base: str, label: str, match: str, start: float, end: float) -> list[str]:
    params = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
    return sorted(str(v) for v in get(base, f"/api/v1/label/{label}/values", params))


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list[Series]:
    params = [("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
    params.append(("step", f"{step:g}"))
    return list(get(base, "/api/v1/query_range", params)["result"])


def query(base: str, expr: str, at: float) -> list[Series]:
    return list(get(base, "/api/v1/query", [("query", expr), ("time", f"{at:.3f}")])["result"])
