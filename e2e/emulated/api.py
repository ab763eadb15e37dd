"""The HTTP routes of the emulated vLLM server (aiohttp), over the engine.

``GET /health`` (200 serving; 503 while loading, draining or after the engine
failed), ``GET /metrics`` (vLLM's series), ``GET /version``, ``GET /v1/models``,
``POST /v1/completions`` and ``POST /v1/chat/completions`` (streaming as SSE
``data: {...}`` chunks ending with ``data: [DONE]``). While the server is not
serving, generation requests get 503 in vLLM's error shape. A client that
goes away (a stream write fails, or the handler is cancelled) has its request
aborted in the engine, as vLLM aborts it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from enum import Enum
from http import HTTPStatus
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from e2e.emulated.args import ServeArgs
from e2e.emulated.engine import Emitted, Engine, NewRequest, Sequence
from e2e.emulated.protocol import (
    ApiError,
    ParsedRequest,
    chat_body,
    completion_body,
    context_check,
    model_not_found,
    models_body,
    new_id,
    parse_chat,
    parse_completion,
    parse_json,
    stream_chunk,
    usage,
    usage_chunk,
)
from e2e.emulated.text import WordSource
from e2e.emulated.vllm_metrics import VllmMetrics
from e2e.emulated.workloads import HEADER, Workload, WorkloadError, parse_workload

VLLM_VERSION = "0.32.0"
"""The vLLM release whose API and metrics this server emulates."""


class State(Enum):
    STARTING = "starting"
    SERVING = "serving"
    DRAINING = "draining"
    FAILED = "failed"


class Api:
    """Routes and the server state they share (``server`` moves the state)."""

    def __init__(
        self,
        args: ServeArgs,
        engine: Engine,
        metrics: VllmMetrics,
        workloads: tuple[Workload, ...],
    ) -> None:
        self.args = args
        self.engine = engine
        self.metrics = metrics
        self.state = State.STARTING
        self._workload_index = {w: i for i, w in enumerate(workloads)}
        self._seeds = itertools.count(args.seed * 1_000_003)
        self.inflight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_page)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        return app

    async def wait_quiet(self) -> None:
        """Until no generation request is being handled."""
        await self._quiet.wait()

    # --- plain routes -----------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if self.state is State.SERVING:
            return web.Response(status=200)
        return web.Response(status=503, text=self.state.value)

    async def metrics_page(self, request: web.Request) -> web.Response:
        body = self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    async def models(self, request: web.Request) -> web.Response:
        if self.state is not State.SERVING:
            return _error(self._unavailable())
        args = self.args
        return web.json_response(
            models_body(args.served_model_names, args.model, args.max_model_len)
        )

    # --- generation -------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if self.state is not State.SERVING:
            return _error(self._unavailable())
        try:
            parsed, workload, max_tokens = self._validate(await request.read(), request, chat)
        except ApiError as err:
            return _error(err)
        seq = self.engine.submit(
            NewRequest(
                prompt_tokens=parsed.prompt_tokens,
                max_tokens=max_tokens,
                ignore_eos=parsed.ignore_eos,
                min_tokens=parsed.min_tokens,
                workload=self._workload_index[workload],
                max_tokens_param=parsed.max_tokens,
            )
        )
        self.inflight += 1
        self._quiet.clear()
        try:
            if parsed.stream:
                return await self._stream(request, parsed, seq)
            return await self._whole(parsed, seq)
        except (asyncio.CancelledError, ConnectionError):
            self.engine.abort(seq)
            raise
        finally:
            self.inflight -= 1
            if self.inflight == 0:
                self._quiet.set()

    def _validate(
        self, raw: bytes, request: web.Request, chat: bool
    ) -> tuple[ParsedRequest, Workload, int]:
        doc = parse_json(raw)
        parsed = parse_chat(doc) if chat else parse_completion(doc)
        served = self.args.served_model_names
        if parsed.model and parsed.model not in served:
            raise model_not_found(parsed.model, served)
        try:
            workload = parse_workload(request.headers.get(HEADER))
        except WorkloadError as err:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(err), err_type="BadRequestError") from None
        max_tokens = context_check(parsed.prompt_tokens, parsed.max_tokens, self.args.max_model_len)
        return parsed, workload, max_tokens

    def _unavailable(self) -> ApiError:
        why = {
            State.STARTING: "the model is still loading",
            State.DRAINING: "the server is shutting down",
            State.FAILED: "the engine has failed",
        }.get(self.state, "not serving")
        return ApiError(HTTPStatus.SERVICE_UNAVAILABLE, f"Service unavailable: {why}")

    async def _whole(self, parsed: ParsedRequest, seq: Sequence) -> web.Response:
        words = WordSource(next(self._seeds))
        pieces: list[str] = []
        while True:
            event = await seq.events.get()
            pieces.extend(words.take(event.tokens))
            if event.finish_reason is not None:
                break
        rid, created, model = new_id(parsed.chat), int(time.time()), self._model_name(parsed)
        use = usage(parsed.prompt_tokens, seq.produced)
        build = chat_body if parsed.chat else completion_body
        return web.json_response(
            build(rid, created, model, "".join(pieces), event.finish_reason, use)
        )

    async def _stream(
        self, request: web.Request, parsed: ParsedRequest, seq: Sequence
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        words = WordSource(next(self._seeds))
        rid, created, model = new_id(parsed.chat), int(time.time()), self._model_name(parsed)
        first = True
        if parsed.chat:  # vLLM's first chat chunk: the role, no content yet
            await _send(response, stream_chunk(True, rid, created, model, "", None, first=True))
            first = False
        finish: str | None = None
        while finish is None:
            tokens, finish = await _next_batch(seq)
            text = "".join(words.take(tokens))
            if tokens or finish is not None:
                chunk = stream_chunk(parsed.chat, rid, created, model, text, finish, first=first)
                await _send(response, chunk)
                first = False
        if parsed.include_usage:
            use = usage(parsed.prompt_tokens, seq.produced)
            await _send(response, usage_chunk(parsed.chat, rid, created, model, use))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _model_name(self, parsed: ParsedRequest) -> str:
        return parsed.model or self.args.served_name


async def _next_batch(seq: Sequence) -> tuple[int, str | None]:
    """The tokens of the next event and of any already queued behind it, and a finish reason.

    Coalescing makes the last text and the finish reason one chunk, as vLLM sends them.
    """
    event: Emitted = await seq.events.get()
    tokens, finish = event.tokens, event.finish_reason
    while finish is None and not seq.events.empty():
        event = seq.events.get_nowait()
        tokens += event.tokens
        finish = event.finish_reason
    return tokens, finish


async def _send(response: web.StreamResponse, chunk: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")


def _error(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=int(err.status))
