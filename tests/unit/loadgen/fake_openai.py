"""A small fake OpenAI streaming server on 127.0.0.1, in a thread of its own.

Not the local cluster's emulated vLLM server: this one does only what a test
scripts, per request (``Script``): how many tokens, how many per chunk, the
delays, whether to send usage, and how to fail (a 500, a hang, a stream cut
halfway, an error event). It records every request (path, headers, body)
and the most requests it ever served at once, which is how the tests see
the client's real concurrency. It runs its own event loop in a thread so
that tests can drive the CLI, which runs ``asyncio.run`` itself.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Script:
    """What the server does with one request."""

    tokens: int = 4
    tokens_per_chunk: int = 1
    first_delay_s: float = 0.0
    """Before the first text chunk (after the role chunk): the TTFT the client should see."""
    token_delay_s: float = 0.0
    """Between text chunks."""
    usage: bool = True
    fail: str | None = None
    """None, a status (``"500"``, ``"503"``, ...), ``"hang"``, ``"cut"`` (close after half
    the chunks), ``"error"``, ``"reset"`` (an RST before any byte of a response)."""
    hang_s: float = 5.0


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeOpenAI:
    """The server's state: its script, what it received, its peak concurrency."""

    plan: Callable[[int], Script] = field(default=lambda _n: Script())
    url: str = ""
    received: list[Recorded] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def script(self, plan: Callable[[int], Script]) -> None:
        """Script request ``n`` (0-based, arrival order) with ``plan(n)``."""
        self.plan = plan

    async def handle(self, request: web.Request) -> web.StreamResponse:
        number = len(self.received)
        self.received.append(Recorded(request.path, dict(request.headers), await request.json()))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, self.plan(number))
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request, script: Script) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        if script.fail is not None and script.fail.isdigit():
            await asyncio.sleep(script.first_delay_s)
            return web.json_response({"error": {"message": "boom"}}, status=int(script.fail))
        if script.fail == "reset":
            _reset(request)
            await asyncio.sleep(script.hang_s)  # the handler outlives its connection
        if script.fail == "hang":
            await asyncio.sleep(script.hang_s)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if chat:
            await _event(response, {"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        chunks = -(-script.tokens // script.tokens_per_chunk)
        await asyncio.sleep(script.first_delay_s)
        for i in range(chunks):
            if i:
                await asyncio.sleep(script.token_delay_s)
            if script.fail == "cut" and i == chunks // 2:
                assert request.transport is not None
                request.transport.close()
                return response
            text = "tok " * script.tokens_per_chunk
            choice = {"index": 0, "delta": {"content": text}} if chat else {"text": text}
            await _event(response, {"choices": [choice]})
        if script.fail == "error":
            await _event(response, {"error": {"message": "engine died", "code": 500}})
            return response
        if script.usage:
            usage = {"prompt_tokens": 3, "completion_tokens": script.tokens}
            await _event(response, {"choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _reset(request: web.Request) -> None:
    """Close the connection with an RST (SO_LINGER 0), as a killed process's kernel does."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _event(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(payload)}\n\n".encode())


def serve() -> Iterator[FakeOpenAI]:
    """Start a server on 127.0.0.1 (a free port) in a thread; stop it after the yield."""
    fake = FakeOpenAI()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", fake.handle)
        app.router.add_post("/v1/completions", fake.handle)
        runner = web.AppRunner(app, shutdown_timeout=0.2, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        fake.url = f"http://{host}:{port}"
        ready.set()
        await stop.wait()
        await runner.cleanup()

    def thread_main() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException as err:  # surfaced to the test below
            failure.append(err)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=thread_main, name="fake-openai", daemon=True)
    thread.start()
    assert ready.wait(10), "the fake server did not start"
    if failure:
        raise failure[0]
    try:
        yield fake
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
