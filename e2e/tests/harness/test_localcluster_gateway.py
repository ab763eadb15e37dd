"""The gateway spreads a Service's requests over its ready pods and streams answers through."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

from e2e.localcluster.emulation import LOCAL_HTTP
from e2e.localcluster.gateway import Endpoints, base_url, make_app, ready_endpoints

SERVICE = {"spec": {"selector": {"app": "chat"}}}


def pod(
    name: str, address: str | None, *, ready: bool = True, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {"app": "chat"}}
    if address:
        meta["annotations"] = {LOCAL_HTTP: address}
    status = "True" if ready else "False"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": status}]}}


def test_only_ready_published_matching_live_pods_are_endpoints() -> None:
    deleting = pod("d", "127.0.0.1:5")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    pods = [
        pod("a", "127.0.0.1:2"),
        pod("b", "127.0.0.1:1"),
        pod("c", "127.0.0.1:3", ready=False),
        pod("e", None),
        pod("f", "127.0.0.1:4", labels={"app": "other"}),
        deleting,
    ]
    assert ready_endpoints(SERVICE, pods) == ["127.0.0.1:1", "127.0.0.1:2"]
    assert ready_endpoints({"spec": {}}, pods) == []  # no selector: no endpoints


def test_a_pod_whose_readiness_probe_fails_is_no_endpoint_yet() -> None:
    """KWOK marks pods Ready at once; a server still loading answered 503 (test_loop)."""
    loading, serving_pod = pod("a", "127.0.0.1:1"), pod("b", "127.0.0.1:2")
    for p in (loading, serving_pod):
        check = {"httpGet": {"path": "/health", "port": "http"}}
        p["spec"] = {"containers": [{"name": "vllm", "readinessProbe": check}]}
    asked: list[tuple[str, str]] = []

    def probe(address: str, path: str) -> bool:
        asked.append((address, path))
        return address == "127.0.0.1:2"

    assert ready_endpoints(SERVICE, [loading, serving_pod], probe) == ["127.0.0.1:2"]
    assert sorted(asked) == [("127.0.0.1:1", "/health"), ("127.0.0.1:2", "/health")]
    assert ready_endpoints(SERVICE, [pod("c", "127.0.0.1:3")], probe) == ["127.0.0.1:3"], (
        "a pod without a readiness probe is ready when Ready"
    )


class FixedEndpoints(Endpoints):
    def __init__(self, found: list[str]) -> None:
        super().__init__(api=None)  # type: ignore[arg-type]
        self.found = found

    def lookup(self, namespace: str, service: str) -> list[str]:
        return list(self.found) if (namespace, service) == ("ml", "chat") else []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serving(app: web.Application, port: int) -> AsyncIterator[None]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


def upstream(name: str) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"who": name, "path": request.path, "q": request.query_string})

    async def stream(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(body["n"]):
            await response.write(f"data: {name}-{i}\n\n".encode())
            await asyncio.sleep(0.05)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", stream)
    return app


def test_requests_round_robin_over_endpoints_and_streams_arrive_in_pieces() -> None:
    async def scenario() -> None:
        ports = [free_port() for _ in range(3)]
        found = [f"127.0.0.1:{p}" for p in ports[:2]]
        async with (
            serving(upstream("a"), ports[0]),
            serving(upstream("b"), ports[1]),
            serving(make_app(FixedEndpoints(found)), ports[2]),
            aiohttp.ClientSession() as client,
        ):
            base = base_url(ports[2], "ml", "chat")
            seen = []
            for _ in range(4):
                async with client.get(f"{base}/v1/models?x=1") as r:
                    body = await r.json()
                    assert r.status == 200 and body["path"] == "/v1/models" and body["q"] == "x=1"
                    seen.append(body["who"])
            assert sorted(seen) == ["a", "a", "b", "b"]
            async with client.post(f"{base}/v1/chat/completions", json={"n": 4}) as r:
                chunks = []
                async for chunk in r.content.iter_any():
                    chunks.append(chunk)
            text = b"".join(chunks).decode()
            assert text.count("data: ") == 5 and text.endswith("data: [DONE]\n\n")
            assert len(chunks) > 1, "the stream was buffered, not relayed as it came"

    asyncio.run(scenario())


def test_no_endpoint_is_503_and_a_dead_endpoint_is_skipped() -> None:
    async def scenario() -> None:
        live, dead, gateway = free_port(), free_port(), free_port()
        endpoints = FixedEndpoints([f"127.0.0.1:{dead}", f"127.0.0.1:{live}"])
        async with (
            serving(upstream("live"), live),
            serving(make_app(endpoints), gateway),
            aiohttp.ClientSession() as client,
        ):
            for _ in range(3):
                async with client.get(f"{base_url(gateway, 'ml', 'chat')}/v1/models") as r:
                    assert r.status == 200 and (await r.json())["who"] == "live"
            async with client.get(f"{base_url(gateway, 'ml', 'nothing')}/v1/models") as r:
                assert r.status == 503
                assert "no ready endpoint" in (await r.json())["error"]["message"]
            endpoints.found = [f"127.0.0.1:{dead}"]
            async with client.get(f"{base_url(gateway, 'ml', 'chat')}/v1/models") as r:
                assert r.status == 503  # every endpoint refused: retriable, as no endpoint is

    asyncio.run(scenario())


def test_an_endpoint_that_closes_before_answering_is_a_retriable_503() -> None:
    """A draining pod closing a kept-alive connection served nothing: the client may retry."""

    async def scenario() -> None:
        closing, gateway = free_port(), free_port()

        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1024)  # take the request, answer nothing
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", closing)
        async with (
            serving(make_app(FixedEndpoints([f"127.0.0.1:{closing}"])), gateway),
            aiohttp.ClientSession() as client,
            client.get(f"{base_url(gateway, 'ml', 'chat')}/v1/models") as r,
        ):
            assert r.status == 503
            assert "closed before answering" in (await r.json())["error"]["message"]
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
