"""The fault proxy passes bodies uncompressed, whatever the API server would compress.

Found by the fresh-clone CI: once the chart's tests had installed the Prometheus
Operator and KEDA CRDs, kopf's CRD list through the proxy exceeded the 128 KiB
the API server compresses above. The proxy reads bodies raw (truncation counts
bytes) and drops Content-Encoding, but its HTTP client offered gzip on its own,
so the operator received gzip bytes as JSON and exited.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from e2e.chaos.proxy import FaultProxy
from e2e.chaos.tls import proxy_certificate
from e2e.localcluster import pki as cluster_pki

BODY = {"kind": "CustomResourceDefinitionList", "items": ["x" * 1000] * 200}


class GzipUpstream:
    """An HTTPS server that compresses its answer whenever the request offers gzip."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.offered: list[str] = []
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(str(cert), str(key))
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _answer(self, request: web.Request) -> web.Response:
        offered = request.headers.get("Accept-Encoding", "")
        self.offered.append(offered)
        raw = json.dumps(BODY).encode()
        if "gzip" in offered:
            return web.Response(
                body=gzip.compress(raw),
                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            )
        return web.Response(body=raw, content_type="application/json")

    def start(self) -> None:
        ready = threading.Event()

        async def serve() -> None:
            app = web.Application()
            app.router.add_get("/{tail:.*}", self._answer)
            self._runner = runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self._tls)
            await site.start()
            server = site._server
            assert isinstance(server, asyncio.Server)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        def run() -> None:
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        assert ready.wait(10), "the upstream did not start"

    def stop(self) -> None:
        if self._runner is not None:
            done = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            done.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[FaultProxy, GzipUpstream, ssl.SSLContext]]:
    pki = cluster_pki.create(tmp_path / "pki")
    cert, key = proxy_certificate(pki)
    upstream = GzipUpstream(cert, key)
    upstream.start()
    proxy = FaultProxy(
        f"https://127.0.0.1:{upstream.port}", ca_file=pki.ca_cert, cert_file=cert, key_file=key
    ).start()
    try:
        yield proxy, upstream, ssl.create_default_context(cafile=str(pki.ca_cert))
    finally:
        proxy.stop()
        upstream.stop()


def test_a_large_list_reaches_the_client_as_plain_json_even_if_it_asks_for_gzip(
    proxied: tuple[FaultProxy, GzipUpstream, ssl.SSLContext],
) -> None:
    proxy, upstream, client_tls = proxied
    request = urllib.request.Request(
        proxy.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        headers={"Accept-Encoding": "gzip"},  # what kopf's aiohttp offers
    )
    with urllib.request.urlopen(request, context=client_tls, timeout=10) as answer:
        encoding = answer.headers.get("Content-Encoding")
        body = answer.read()

    assert upstream.offered == ["identity"]
    assert encoding is None
    assert json.loads(body) == BODY
