"""The liveness endpoint of an operator that stands by for the leader Lease.

Why a module of its own: kopf serves the liveness probe only once it runs,
which is after this process has won the election (``leader.py``). A standby
would otherwise fail its probe and be restarted in a loop, each restart
putting it back at the end of the wait. So until kopf starts, this small
server answers on the same address and path kopf will serve.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from types import TracebackType
from typing import Any

from specdeploy.operator.reactor.leader import LeaderElector


def parse_endpoint(endpoint: str) -> tuple[str, int, str]:
    """(host, port, path) of a liveness URL as kopf reads it (``http://host:port/path``)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme != "http":
        raise ValueError(f"liveness endpoint {endpoint!r}: only http:// is served")
    port = parts.port if parts.port is not None else 80
    return parts.hostname or "localhost", port, parts.path or "/"


class StandbyProbe:
    """Answers the liveness endpoint while this process stands by; kopf serves it once we lead.

    A standby is alive (a restart would only make it wait again), so its
    probe answers 200 with ``{"standby": true, "holder": ...}`` on the path
    kopf would serve, and 404 elsewhere.
    """

    def __init__(self, endpoint: str, elector: LeaderElector) -> None:
        host, port, path = parse_endpoint(endpoint)
        probe_path = path

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the stdlib's name
                if urllib.parse.urlsplit(self.path).path != probe_path:
                    self.send_error(404)
                    return
                body = json.dumps({"standby": True, "holder": elector.holder}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # a probe every few seconds is not news

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="standby-probe", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> StandbyProbe:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
