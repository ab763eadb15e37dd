"""A small PromQL client over aiohttp: instant queries, bounded, with clear errors.

Why plain HTTP over aiohttp rather than ``prometheus-api-client``: kopf
already brings aiohttp (no new dependency in the operator's image) and it is
asynchronous, like kopf's loop; ``prometheus-api-client`` 0.7 is synchronous
(``requests``, so every query would need a thread) and pulls ``dateparser``
(pandas and matplotlib are optional extras since 0.6); and only one endpoint
is needed, ``/api/v1/query``, whose answer is a few lines of JSON to check.

Every query has a deadline (connect to last byte) and a size bound; an
answer that is not Prometheus' JSON (an HTML login page, a proxy's error),
too large, or an error status raises ``PrometheusError`` with ``problem`` set,
never anything else. Values that are not finite (NaN, +Inf) are dropped:
they carry no count. The request is a plain value (``Query``) before it is
sent, so the batching can be tested without a network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from specdeploy.operator.telemetry.vector import (
    QUERY_PATH,
    PrometheusError,
    Query,
    Sample,
    bad,
    parse_vector,
)
from specdeploy.operator.telemetry.window import FetchProblem

__all__ = ["QUERY_PATH", "PromClient", "PrometheusError", "Query", "Sample", "parse_vector"]


async def _read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    declared = response.content_length
    if declared is not None and declared > limit:
        raise bad(f"answer of {declared} bytes exceeds the {limit}-byte bound")
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(64 << 10):
        size += len(chunk)
        if size > limit:
            raise bad(f"answer exceeds the {limit}-byte bound")
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class PromClient:
    """Instant queries against one Prometheus (``base_url``: ``http://host:9090``)."""

    base_url: str
    session: aiohttp.ClientSession
    timeout_seconds: float = 10.0
    max_response_bytes: int = 8 << 20
    observe: Callable[[FetchProblem | None], None] | None = None
    """Told of every query's end: None when answered, else its problem (the operator's metrics)."""

    async def query(self, query: Query) -> list[Sample]:
        """One instant query (POST, so long selectors fit); PrometheusError on any failure."""
        try:
            samples = await self._query(query)
        except PrometheusError as err:
            if self.observe is not None:
                self.observe(err.problem)
            raise
        if self.observe is not None:
            self.observe(None)
        return samples

    async def _query(self, query: Query) -> list[Sample]:
        url = self.base_url.rstrip("/") + QUERY_PATH
        timeout = aiohttp.ClientTimeout(total=self.timeout_seconds)
        try:
            async with self.session.post(
                url, data={"query": query.promql}, timeout=timeout
            ) as response:
                body = await _read_bounded(response, self.max_response_bytes)
                if response.status >= 500 or response.status == 429:
                    raise PrometheusError(
                        FetchProblem.UNREACHABLE, f"{query.name}: HTTP {response.status}"
                    )
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            reason = type(err).__name__ if not str(err) else f"{type(err).__name__}: {err}"
            raise PrometheusError(FetchProblem.UNREACHABLE, f"{query.name}: {reason}") from None
        try:
            return parse_vector(body)
        except PrometheusError as err:
            raise bad(f"{query.name}: HTTP {response.status}: {err}") from None

    async def query_all(
        self, queries: Sequence[Query], *, concurrency: int = 4
    ) -> dict[str, list[Sample]]:
        """Every query, at most ``concurrency`` in flight; the first failure fails the batch."""
        gate = asyncio.Semaphore(max(concurrency, 1))

        async def one(q: Query) -> tuple[str, list[Sample]]:
            async with gate:
                return q.name, await self.query(q)

        answers = await asyncio.gather(*(one(q) for q in queries), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return dict(a for a in answers if not isinstance(a, BaseException))
