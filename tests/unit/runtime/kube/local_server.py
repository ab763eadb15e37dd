"""A real HTTP(S) server on 127.0.0.1 that records what reached it and answers what it is told.

The client under test is the official one, so what matters is what goes on
the wire: method, path, query, headers, body, and (over TLS) which client
certificate was presented.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Answer = tuple[int, bytes, dict[str, str]]


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes
    client_cn: str | None

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Server:
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    queue: list[Answer] = field(default_factory=list)
    otherwise: Answer = (200, b"{}", {})

    def answer(self, status: int, body: object = None, **headers: str) -> None:
        """Queue one answer (a dict is sent as JSON); once the queue is empty, ``otherwise``."""
        data = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        self.queue.append((status, data, headers))

    def always(self, status: int, body: object = None, **headers: str) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        self.otherwise = (status, data, headers)


def _client_cn(handler: BaseHTTPRequestHandler) -> str | None:
    connection = handler.connection
    if not isinstance(connection, ssl.SSLSocket):
        return None
    subject: Any = (connection.getpeercert() or {}).get("subject", ())
    names = {key: value for rdn in subject for key, value in rdn}
    return str(names["commonName"]) if "commonName" in names else None


def serve(context: ssl.SSLContext | None = None) -> Iterator[Server]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            state.seen.append(
                Seen(
                    method=self.command,
                    path=url.path,
                    query=parse_qsl(url.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length),
                    client_cn=_client_cn(self),
                )
            )
            status, data, headers = state.queue.pop(0) if state.queue else state.otherwise
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name.replace("_", "-"), value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    scheme = "https" if context is not None else "http"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config))  # JSON is YAML
    return path
