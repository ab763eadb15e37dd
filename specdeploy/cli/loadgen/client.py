"""The only module that talks HTTP: one streaming request through aiohttp.

aiohttp is not a core dependency of the wheel; it comes with kopf in the
``operator`` extra, and the CLI says so when it is missing. The session
follows no redirects and ignores proxy variables (``trust_env=False``), so
the loopback host the URL was checked for is the host it talks to; its
connection pool allows exactly the run's concurrency, so the pool never
throttles the workers (aiohttp's default is 100).
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable

import aiohttp

from specdeploy.cli.loadgen.request import RequestSpec
from specdeploy.cli.loadgen.results import Measured, failed, from_stream
from specdeploy.cli.loadgen.stream import StreamProtocolError, StreamState

Clock = Callable[[], float]

ERROR_BODY_BYTES = 300
"""How much of an error response is kept as the row's detail."""
MAX_LINE_BYTES = 1 << 20
"""The longest event line read (aiohttp raises beyond its buffer: counted ``bad_stream``)."""


def connect_reason(error: OSError) -> str:
    """``refused`` when nothing listens, ``reset`` when the listener went away mid-connect
    (both retriable: the server sent nothing and said so), ``connect`` for any other failure.

    A server that closes its port while a connection waits in its accept queue resets it:
    the client's connect then fails with ECONNRESET, not ECONNREFUSED (seen when the
    emulated server drains and exits under load, about once in 15 runs on a busy box).
    """
    if error.errno == errno.ECONNREFUSED:
        return "refused"
    return "reset" if error.errno == errno.ECONNRESET else "connect"


def open_session(concurrency: int) -> aiohttp.ClientSession:
    """A session whose pool holds ``concurrency`` connections, no proxies, no cookies kept."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),  # the request's own deadline rules
        read_bufsize=MAX_LINE_BYTES,
    )


async def stream_request(
    session: aiohttp.ClientSession,
    spec: RequestSpec,
    *,
    timeout_s: float,
    clock: Clock,
) -> Measured:
    """Send ``spec``, read its event stream, and say how it went; never raises for I/O."""
    sent_at = clock()
    state = StreamState()
    status: int | None = None

    def fail(reason: str, detail: str | None = None) -> Measured:
        return failed(
            reason, sent_at=sent_at, ended_at=clock(), status=status, state=state, detail=detail
        )

    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(
                spec.url, json=dict(spec.body), headers=dict(spec.headers), allow_redirects=False
            ) as response:
                status = response.status
                if status != 200:
                    body = await response.content.read(ERROR_BODY_BYTES)
                    return fail(f"http_{status}", body.decode("utf-8", errors="replace"))
                async for line in response.content:
                    state.feed(line, clock())
                    if state.done or state.error is not None:
                        break
    except TimeoutError:
        return fail("timeout", f"no complete answer within {timeout_s:g} s")
    except StreamProtocolError as err:
        return fail("bad_stream", str(err))
    except aiohttp.ClientPayloadError as err:
        return fail("broken_stream", str(err)[:200])
    except aiohttp.ServerDisconnectedError as err:
        return fail("disconnected" if status is None else "broken_stream", str(err)[:200])
    except aiohttp.ClientConnectorError as err:
        return fail(connect_reason(err.os_error), str(err)[:200])
    except (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError) as err:
        # The connection broke. Before the status line the server had sent nothing (a reset,
        # or a keep-alive connection it closed while the request went out: aiohttp's "Can
        # not write request body"); after it, the response was cut.
        return fail("reset" if status is None else "broken_stream", str(err)[:200])
    except aiohttp.ClientError as err:
        return fail("client_error", f"{type(err).__name__}: {err}"[:200])
    except ValueError as err:  # aiohttp's reader: a line longer than its buffer
        return fail("bad_stream", str(err)[:200])
    return from_stream(state, sent_at=sent_at, ended_at=clock(), status=status)
