"""Only loopback servers: ``specdeploy load`` must never be pointed at someone's production.

A host is accepted when it is a literal loopback address (127.0.0.0/8,
``::1``, or 127.0.0.0/8 written as an IPv4-mapped IPv6 address) or the
name ``localhost`` whose every resolved address is loopback (``/etc/hosts``
could say otherwise). Any other name is refused without being resolved:
what a DNS name points at can change between this check and the connection.
The client also follows no redirects and reads no proxy settings, so the
checked host is the one it talks to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from specdeploy.cli.loadgen.config import UsageError

LOCALHOST_NAMES = frozenset({"localhost", "localhost."})

Resolver = Callable[[str], Sequence[str]]
"""A host name to the addresses it resolves to (injected so tests need no resolver)."""

WHY = (
    "specdeploy load is a test tool and only sends to loopback addresses "
    "(127.0.0.0/8, ::1, localhost)"
)


def resolve_all(host: str) -> list[str]:
    """Every address ``host`` resolves to, both families."""
    infos: list[tuple[Any, ...]] = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def is_loopback_address(text: str) -> bool:
    """Whether ``text`` is a literal loopback IP (a zone id such as ``%lo`` allowed)."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_host(host: str, *, resolve: Resolver = resolve_all) -> bool:
    """A literal loopback address, or ``localhost`` resolving only to loopback."""
    if is_loopback_address(host):
        return True
    if host.lower() not in LOCALHOST_NAMES:
        return False
    try:
        addresses = resolve(host)
    except OSError:
        return False
    return bool(addresses) and all(is_loopback_address(a) for a in addresses)


def require_loopback(url: str, *, resolve: Resolver = resolve_all) -> str:
    """The server's base URL, normalised (no trailing ``/`` or ``/v1``), if it is loopback.

    Raises ``UsageError`` (exit code 2) saying why otherwise.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"--url: expected http:// or https://, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"--url: no query, fragment or credentials, got {url!r}")
    host = parts.hostname
    if not host:
        raise UsageError(f"--url: no host in {url!r}")
    try:
        parts.port  # noqa: B018 (parsing the port validates it)
    except ValueError:
        raise UsageError(f"--url: invalid port in {url!r}") from None
    if not is_loopback_host(host, resolve=resolve):
        raise UsageError(f"--url: refusing {host!r}, not a loopback address: {WHY}")
    path = parts.path.rstrip("/").removesuffix("/v1")
    if path.endswith("/completions"):
        raise UsageError(
            f"--url: give the server's base URL (http://127.0.0.1:8000), not an endpoint; "
            f"--api picks /v1/chat/completions or /v1/completions (got {url!r})"
        )
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
