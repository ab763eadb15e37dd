"""A loopback ``/metrics`` endpoint for tests: whatever ``render`` returns, in the text format.

Tests that need Prometheus to scrape a series they control (the harness's own
scrape contract, the custom-metrics chain) register this endpoint as a file-SD
target; ``render`` is called per scrape, so a test can change the value live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve_metrics(render: Callable[[], bytes]) -> ThreadingHTTPServer:
    """Serve ``render()`` at ``/metrics`` on 127.0.0.1 (a free port) from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, payload = (200, render()) if self.path == "/metrics" else (404, b"")
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_args: Any) -> None:
            pass  # a scrape every 2 s is not news

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
