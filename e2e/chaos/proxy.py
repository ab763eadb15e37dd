"""A TLS-terminating fault proxy in front of the API server (review §5.1 #3).

The operator's kubeconfig names the proxy as its server; the proxy forwards
every request to the real API server with the caller's ``Authorization``
header and ``User-Agent`` (so RBAC and the audit log see the operator, not
the proxy), and streams watch responses as they come. Rules, added and
removed from the test process while the proxy runs in a thread of its own,
decide what happens to a request instead:

- ``delay``: wait ``seconds`` before forwarding;
- ``status``: answer ``status`` (500/503/429...) with a Kubernetes Status
  body and, when given, ``Retry-After``, without forwarding;
- ``reset``: reset the client's connection without forwarding;
- ``reset_after_forward``: forward, then reset before the answer;
- ``truncate``: forward, then send only the first ``truncate_bytes`` of the
  body under the full ``Content-Length`` (the client reads an
  ``IncompleteRead``);
- ``drop_watch``: forward a watch and cut it after ``seconds``;
- ``kill_after_forward``: forward, wait for the API server's answer (the
  write is done), call the rule's ``on_fire`` (SIGKILL the operator), then
  reset: an exact crash point between two writes, without any change to the
  operator's code.

A rule matches by method (a regular expression, e.g. ``POST|PATCH``), path
regular expression (searched in the path with its query) and occurrence:
with ``nth`` it fires on the nth matching request only; ``arm``, when given,
starts the count at the first request that matches it (so "the 2nd write
of the reconcile that applies the table" is expressible). An upstream that
refuses connections (a killed API server) resets the client's connection,
as the real server's absence would.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

HOP_BY_HOP = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        # Bodies pass as the server wrote them, uncompressed: truncation counts bytes.
        "accept-encoding",
        "content-encoding",
    }
)
WRITE_METHODS = "POST|PUT|PATCH|DELETE"
HISTORY = 2000
"""Requests remembered for inspection (a bounded log: the proxy may run for an hour)."""
SHUTDOWN_S = 2.0
"""How long ``stop`` lets handlers still running finish before they are cancelled."""


class Action(enum.StrEnum):
    DELAY = "delay"
    STATUS = "status"
    RESET = "reset"
    RESET_AFTER_FORWARD = "reset_after_forward"
    TRUNCATE = "truncate"
    DROP_WATCH = "drop_watch"
    KILL_AFTER_FORWARD = "kill_after_forward"


@dataclass(frozen=True)
class Match:
    """Which requests: method and path (with query) regular expressions, watch or not."""

    method: str = ".*"
    path: str = ".*"
    watch: bool | None = None
    """True: watch requests only; False: no watches; None: either."""

    def __call__(self, method: str, path: str) -> bool:
        if self.watch is not None and is_watch(path) != self.watch:
            return False
        return (
            re.fullmatch(self.method, method) is not None and re.search(self.path, path) is not None
        )


@dataclass
class Rule:
    """One fault; counters are updated under the proxy's lock."""

    action: Action
    match: Match = field(default_factory=Match)
    nth: int | None = None
    """Fire on the nth matching request only (1-based); None: on every one, ``times`` at most."""
    times: int | None = None
    """At most this many firings (None: unbounded)."""
    every: int | None = None
    """Fire on every ``every``-th matching request (a deterministic fraction: 5 is 20%)."""
    arm: Match | None = None
    """Counting starts at the first request matching this (None: at once)."""
    seconds: float = 0.0
    status: int = 503
    retry_after: int | None = None
    truncate_bytes: int = 0
    on_fire: Callable[[], None] | None = None
    armed: bool = False
    matched: int = 0
    fired: int = 0
    fired_on: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.armed = self.arm is None
        if self.nth is not None and self.nth < 1:
            raise ValueError(f"nth counts from 1, not {self.nth}")

    def consider(self, method: str, path: str) -> bool:
        """Whether this request fires the rule (and count it)."""
        if not self.armed and self.arm is not None and self.arm(method, path):
            self.armed = True
        if not self.armed or not self.match(method, path):
            return False
        self.matched += 1
        if self.nth is not None and self.matched != self.nth:
            return False
        if self.every is not None and self.matched % self.every:
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        self.fired += 1
        self.fired_on.append(f"{method} {path}")
        return True


@dataclass(frozen=True)
class Seen:
    """One request the proxy handled, for a test to read."""

    at: float
    method: str
    path: str
    action: str
    status: int | None


def is_watch(path: str) -> bool:
    return re.search(r"[?&]watch=(true|1)(&|$)", path) is not None


def status_body(code: int, message: str, retry_after: int | None = None) -> dict[str, Any]:
    """A Status as the API server writes it; with ``retry_after``, its details carry it as
    ``retryAfterSeconds`` beside the Retry-After header, as the API server's 429s do."""
    reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason.get(code, "InternalError"),
        "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


def _reset(request: web.BaseRequest) -> None:
    """Close the client's connection with a TCP RST (SO_LINGER 0), not a clean FIN."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _Closed(Exception):
    """The client's connection was closed on purpose; nothing more to send."""


class FaultProxy:
    """The proxy: ``start()`` it, point a kubeconfig at ``url``, ``add`` rules."""

    def __init__(self, upstream: str, *, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self._ca_file = ca_file
        self._cert = (cert_file, key_file)
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self.seen: deque[Seen] = deque(maxlen=HISTORY)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._watches: dict[int, web.BaseRequest] = {}
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # --- control (from any thread) -------------------------------------------

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def drop_watches(self) -> int:
        """Cut every watch stream open now; how many were cut."""
        loop = self._loop
        if loop is None:
            return 0
        future = asyncio.run_coroutine_threadsafe(self._drop_all(), loop)
        return future.result(timeout=10)

    async def _drop_all(self) -> int:
        open_now = list(self._watches.values())
        for request in open_now:
            _reset(request)
        return len(open_now)

    def start(self, *, timeout: float = 30.0) -> FaultProxy:
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as err:  # reported to start()'s caller
                errors.append(err)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=serve, name="chaos-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("the fault proxy did not start")
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=15)
        self._loop = self._thread = None

    # --- the server ------------------------------------------------------------

    async def _open(self) -> None:
        upstream_tls = ssl.create_default_context(cafile=str(self._ca_file))
        connector = aiohttp.TCPConnector(ssl=upstream_tls, limit=100)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
        )
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(self._cert[0]), str(self._cert[1]))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # shutdown_timeout: a watch relayed when the lab closes waits on its upstream, which
        # only the API server ends; aiohttp's default (60 s) outlasted stop()'s join (15 s).
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_S
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving)
        await site.start()
        server = site._server
        assert server is not None and isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        await self._drop_all()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _fire(self, method: str, path: str) -> list[Rule]:
        with self._lock:
            return [r for r in self._rules if r.consider(method, path)]

    def _note(self, method: str, path: str, action: str, status: int | None) -> None:
        self.seen.append(Seen(time.time(), method, path, action, status))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path_qs
        fired = self._fire(method, path)
        actions = {r.action: r for r in fired}
        try:
            return await self._apply(request, method, path, actions)
        except _Closed:
            # aiohttp needs a response object; the connection is already gone.
            return web.Response(status=499)

    async def _apply(
        self, request: web.Request, method: str, path: str, actions: dict[Action, Rule]
    ) -> web.StreamResponse:
        if Action.DELAY in actions:
            await asyncio.sleep(actions[Action.DELAY].seconds)
        if Action.STATUS in actions:
            rule = actions[Action.STATUS]
            self._note(method, path, "status", rule.status)
            headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
            return web.json_response(
                status_body(rule.status, f"chaos proxy: injected {rule.status}", rule.retry_after),
                status=rule.status,
                headers=headers,
            )
        if Action.RESET in actions:
            self._note(method, path, "reset", None)
            _reset(request)
            raise _Closed
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        # Said explicitly: aiohttp would otherwise offer gzip on its own, and the API server
        # compresses a large list (over 128 KiB, e.g. the CRDs once third-party ones are
        # installed), which would reach the client without its Content-Encoding.
        headers["Accept-Encoding"] = "identity"
        assert self._session is not None
        try:
            upstream = await self._session.request(
                method, self.upstream + path, data=body or None, headers=headers
            )
        except (aiohttp.ClientError, OSError):
            # The API server is down: the client sees its connection fail, as without us.
            self._note(method, path, "upstream-down", None)
            _reset(request)
            raise _Closed from None
        async with upstream:
            if is_watch(path) and upstream.status == 200:
                return await self._stream(request, upstream, method, path, actions)
            payload = await upstream.read()
            return await self._answer(request, upstream, payload, method, path, actions)

    async def _answer(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        payload: bytes,
        method: str,
        path: str,
        actions: dict[Action, Rule],
    ) -> web.StreamResponse:
        for after in (Action.KILL_AFTER_FORWARD, Action.RESET_AFTER_FORWARD):
            if after in actions:
                self._note(method, path, after.value, upstream.status)
                callback = actions[after].on_fire
                if callback is not None:
                    callback()
                _reset(request)
                raise _Closed
        response = web.StreamResponse(status=upstream.status, headers=_answer_headers(upstream))
        response.content_length = len(payload)
        await response.prepare(request)
        if Action.TRUNCATE in actions:
            self._note(method, path, "truncate", upstream.status)
            await response.write(payload[: actions[Action.TRUNCATE].truncate_bytes])
            await asyncio.sleep(0.05)  # let the partial body leave before the reset
            _reset(request)
            raise _Closed
        self._note(method, path, "forward", upstream.status)
        await response.write(payload)
        await response.write_eof()
        return response

    async def _stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        method: str,
        path: str,
        actions: dict[Action, Rule],
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=_answer_headers(upstream))
        await response.prepare(request)
        self._note(method, path, "watch", upstream.status)
        self._watches[id(request)] = request
        cut_at = None
        if Action.DROP_WATCH in actions:
            cut_at = time.monotonic() + actions[Action.DROP_WATCH].seconds
        try:
            while True:
                wait = None if cut_at is None else max(0.0, cut_at - time.monotonic())
                try:
                    chunk = await asyncio.wait_for(upstream.content.readany(), timeout=wait)
                except TimeoutError:
                    self._note(method, path, "drop_watch", upstream.status)
                    _reset(request)
                    raise _Closed from None
                if not chunk:
                    break
                await response.write(chunk)
        except (aiohttp.ClientError, ConnectionError):
            _reset(request)  # the server went away mid-stream: so does the stream
            raise _Closed from None
        finally:
            self._watches.pop(id(request), None)
        await response.write_eof()
        return response


def _answer_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
