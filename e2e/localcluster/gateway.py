"""The local cluster's stand-in for kube-proxy: a Service's ready pods, reachable from the host.

There is no kube-proxy and no pod network here: a serving pod is a local
process on a loopback port that the kubelet stand-in publishes on the pod
(``emulation.LOCAL_HTTP``). This gateway answers
``http://127.0.0.1:PORT/<namespace>/<service>/...`` by forwarding the rest of
the path to one of the Service's endpoints, round-robin, as a ClusterIP
Service spreads connections:

* endpoints are the pods the Service's selector matches in its namespace
  that are Ready, not terminating and published by the stand-in (looked up
  through the API at most every ``REFRESH_SECONDS``, so a pod that goes
  away stops receiving new requests within that time), and whose readiness
  probe answers: the kubelet stand-in holds a serving pod's Ready back until
  its probe first passes (``stages.PROBE_PASSED``), but nothing marks a pod
  unready again, so the gateway asks the probe's path itself, as the
  kubelet's periodic probe would before the endpoints controller drops a pod
  (a draining server answers 503);
* a refused connection tries the next endpoint (at most one per endpoint);
  no endpoint at all answers 503 with a JSON reason, as a client sees an
  empty Service;
* responses stream through chunk by chunk (server-sent events of a
  streaming completion arrive as the server writes them).

``specdeploy dev url NAMESPACE/NAME`` prints the base URL of a
SpeculativeDeployment's Service through this gateway. Dev code: not in the wheel.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from e2e.localcluster.emulation import LOCAL_HTTP
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.probes import Probe, http_probe, readiness_path
from specdeploy.runtime.kube import paths

REFRESH_SECONDS = 1.0
CONNECT_TIMEOUT = 5.0
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def base_url(port: int, namespace: str, service: str) -> str:
    """What a client uses as its OpenAI base URL's root (append ``/v1``)."""
    return f"http://127.0.0.1:{port}/{namespace}/{service}"


def ready_endpoints(
    service: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], probe: Probe | None = None
) -> list[str]:
    """``host:port`` of the Service's ready, published, non-terminating pods (sorted), each
    passing its readiness probe when ``probe`` is given and the pod has one."""
    selector = service.get("spec", {}).get("selector") or {}
    if not selector:
        return []
    found = []
    for pod in pods:
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()) or meta.get("deletionTimestamp"):
            continue
        address = (meta.get("annotations") or {}).get(LOCAL_HTTP)
        conditions = pod.get("status", {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        path = readiness_path(pod)
        if address and ready and (probe is None or path is None or probe(str(address), path)):
            found.append(str(address))
    return sorted(found)


class Endpoints:
    """Each Service's endpoints, refreshed from the API at most every ``REFRESH_SECONDS``."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._cache: dict[tuple[str, str], tuple[float, list[str]]] = {}
        self._turn: dict[tuple[str, str], itertools.count[int]] = {}

    def lookup(self, namespace: str, service: str) -> list[str]:
        key = (namespace, service)
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < REFRESH_SECONDS:
            return cached[1]
        svc = self.api.get_or_none(paths.path("Service", namespace=namespace, name=service))
        found: list[str] = []
        if svc is not None:
            pods = self.api.items(paths.path("Pod", namespace))
            found = ready_endpoints(svc, pods, http_probe)
        self._cache[key] = (time.monotonic(), found)
        return found

    def ordered(self, namespace: str, service: str, found: list[str]) -> list[str]:
        """``found`` rotated by one per call (round-robin across requests)."""
        if not found:
            return []
        turn = next(self._turn.setdefault((namespace, service), itertools.count()))
        start = turn % len(found)
        return found[start:] + found[:start]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


def make_app(endpoints: Endpoints) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    session: dict[str, aiohttp.ClientSession] = {}

    async def start(_app: web.Application) -> None:
        session["client"] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
            auto_decompress=False,
        )

    async def stop(_app: web.Application) -> None:
        await session["client"].close()

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def forward(request: web.Request) -> web.StreamResponse:
        namespace, service = request.match_info["namespace"], request.match_info["service"]
        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(None, endpoints.lookup, namespace, service)
        except (ApiError, OSError) as err:
            return _error(502, f"gateway: cannot read Service {namespace}/{service}: {err}")
        targets = endpoints.ordered(namespace, service, found)
        if not targets:
            return _error(503, f"gateway: no ready endpoint for Service {namespace}/{service}")
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        tail = "/" + request.match_info["tail"]
        if request.query_string:
            tail += "?" + request.query_string
        last: Exception | None = None
        for target in targets:
            try:
                return await _relay(
                    session["client"], request, f"http://{target}{tail}", headers, body
                )
            except aiohttp.ClientConnectorError as err:  # try the next endpoint
                last = err
            except _Unanswered as err:
                # The endpoint went away before its status line (a draining pod closing a
                # kept-alive connection): the request was not served, so say so retriably,
                # as a client of a real Service sees a refused connection.
                return _error(503, f"gateway: {target} closed before answering: {err.cause}")
        # Every endpoint refused the connection: as good as no ready endpoint (retriable).
        return _error(503, f"gateway: no endpoint of {namespace}/{service} answered: {last}")

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/healthz", healthz)
    app.router.add_route("*", "/{namespace}/{service}/{tail:.*}", forward)
    return app


class _Unanswered(Exception):
    """The upstream connection broke before any response byte reached the client."""

    def __init__(self, cause: aiohttp.ClientError) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def _relay(
    client: aiohttp.ClientSession,
    request: web.Request,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
) -> web.StreamResponse:
    try:
        upstream = await client.request(request.method, url, headers=headers, data=body)
    except aiohttp.ClientConnectorError:
        raise  # refused: the caller tries the next endpoint
    except aiohttp.ClientError as err:
        raise _Unanswered(err) from err
    try:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for key, value in upstream.headers.items():
            if key.lower() not in HOP_BY_HOP:
                response.headers[key] = value
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        upstream.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = make_app(Endpoints(KubeApi.from_kubeconfig(args.kubeconfig)))

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.port).start()
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        await runner.cleanup()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
