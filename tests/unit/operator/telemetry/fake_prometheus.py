"""A fake Prometheus HTTP API: ``/api/v1/query`` answering canned vectors, or failing on demand.

``answers`` maps a substring of the PromQL (a metric name) to the result
list; every query is recorded, so a test can count and read them. ``mode``
makes the server misbehave as real ones do: HTML, an oversized body, 503,
a slow answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer


@dataclass
class FakePrometheus:
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    mode: str = "ok"
    queries: list[str] = field(default_factory=list)
    now: float = 1_000_000.0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        promql = str(form.get("query") or request.query.get("query", ""))
        self.queries.append(promql)
        if self.mode == "html":
            return web.Response(text="<html>proxy login</html>", content_type="text/html")
        if self.mode == "503":
            return web.Response(status=503, text="service unavailable")
        if self.mode == "huge":
            return web.Response(body=b"[" + b"1," * (2 << 20) + b"1]")
        if self.mode == "slow":
            await asyncio.sleep(5)
        result = []
        for needle, rows in self.answers.items():
            if needle in promql:
                result = rows
                break
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return web.Response(text=json.dumps(body), content_type="application/json")


def row(value: float | str, labels: dict[str, str], *, t: float = 1_000_000.0) -> dict[str, Any]:
    """One element of an instant vector."""
    return {"metric": labels, "value": [t, str(value)]}


@asynccontextmanager
async def serving(fake: FakePrometheus) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/api/v1/query", fake.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()
