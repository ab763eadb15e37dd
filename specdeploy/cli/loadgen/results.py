"""One request's outcome: ok, or not by kind, with its token timings.

Kinds (the summary counts each), and the outcome class each falls in:

=================  =========  ================================================
``http_<status>``  refused    429 or 503: the server turned it away, retriable
``http_<status>``  failed     any other status than 200
``refused``        refused    connection refused (nothing listens: a pod gone)
``reset``          refused    the connection broke before any byte of a response
``disconnected``   refused    the connection closed before the response began
``timeout``        timed_out  the request ran past ``--timeout``
``connect``        failed     no connection for another reason (unreachable)
``broken_stream``  failed     the stream ended or was cut before ``data: [DONE]``
``stream_error``   failed     the server sent an error event in the stream
``bad_stream``     failed     an event that is not an OpenAI-style chunk
``no_tokens``      failed     the stream finished without a single output token
``client_error``   failed     any other HTTP client error
=================  =========  ================================================

Why "refused" is its own class: a pool that scales down or drains closes
its port or answers 503 (vLLM while it drains), and a client retries that
safely, since the server delivered nothing. A request cut once its response
began, or one that never ends, lost work: those are what a run must not
have, and what its exit code reports.

TTFT runs from sending to the first chunk with text; TPOT is
(last text chunk - first text chunk) / (output tokens - 1), undefined for
one token; output tokens are the server's ``usage`` count when it sends one
(a chunk may carry several tokens under speculative decoding), else the
number of text chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.cli.loadgen.stream import StreamState

FAILURE_KINDS = (
    "timeout",
    "refused",
    "reset",
    "connect",
    "disconnected",
    "broken_stream",
    "stream_error",
    "bad_stream",
    "no_tokens",
    "client_error",
)
"""The kinds besides ``http_<status>``."""

OUTCOMES = ("ok", "refused", "failed", "timed_out")
"""Every request falls in exactly one (a cancelled one, cut by Ctrl-C, in none)."""
RETRIABLE_STATUSES = frozenset({429, 503})
REFUSED_KINDS = frozenset({"refused", "reset", "disconnected"})
"""Kinds where the server delivered nothing and said so at the connection."""


def outcome(reason: str | None) -> str:
    """The outcome class of a request that ended with ``reason`` (None: ok)."""
    if reason is None:
        return "ok"
    if reason == "timeout":
        return "timed_out"
    if reason in REFUSED_KINDS:
        return "refused"
    if reason.startswith("http_") and reason[5:].isdigit():
        return "refused" if int(reason[5:]) in RETRIABLE_STATUSES else "failed"
    return "failed"


@dataclass(frozen=True)
class Measured:
    """What the client saw of one request, on the run's clock (seconds)."""

    sent_at: float
    ended_at: float
    reason: str | None
    """None when the request succeeded, else its failure kind."""
    status: int | None = None
    output_tokens: int = 0
    tokens_from: str | None = None
    """``usage`` or ``chunks``: where ``output_tokens`` came from."""
    first_token_at: float | None = None
    last_token_at: float | None = None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def outcome(self) -> str:
        """``ok``, ``refused``, ``failed`` or ``timed_out`` (``OUTCOMES``)."""
        return outcome(self.reason)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent_at

    @property
    def tpot_s(self) -> float | None:
        return tpot(self.first_token_at, self.last_token_at, self.output_tokens)

    @property
    def latency_s(self) -> float:
        return self.ended_at - self.sent_at


def tpot(first: float | None, last: float | None, tokens: int) -> float | None:
    """Time per output token after the first; None below two tokens."""
    if first is None or last is None or tokens < 2:
        return None
    return (last - first) / (tokens - 1)


def output_tokens(state: StreamState) -> tuple[int, str]:
    """The server's usage count when it sent one, else the text chunks; and which it was."""
    if state.usage_tokens is not None:
        return state.usage_tokens, "usage"
    return state.text_chunks, "chunks"


def from_stream(state: StreamState, *, sent_at: float, ended_at: float, status: int) -> Measured:
    """The outcome of a 200 response whose events ``state`` took."""
    tokens, source = output_tokens(state)
    reason = None
    if state.error is not None:
        reason = "stream_error"
    elif not state.done:
        reason = "broken_stream"
    elif tokens == 0:
        reason = "no_tokens"
    return Measured(
        sent_at=sent_at,
        ended_at=ended_at,
        reason=reason,
        status=status,
        output_tokens=tokens,
        tokens_from=source,
        first_token_at=state.first_token_at,
        last_token_at=state.last_token_at,
        detail=state.error,
    )


def failed(
    reason: str,
    *,
    sent_at: float,
    ended_at: float,
    status: int | None = None,
    state: StreamState | None = None,
    detail: str | None = None,
) -> Measured:
    """A failure, keeping whatever the stream delivered before it (tokens, timings)."""
    state = state or StreamState()
    tokens, source = output_tokens(state)
    return Measured(
        sent_at=sent_at,
        ended_at=ended_at,
        reason=reason,
        status=status,
        output_tokens=tokens,
        tokens_from=source if tokens else None,
        first_token_at=state.first_token_at,
        last_token_at=state.last_token_at,
        detail=detail,
    )


@dataclass(frozen=True)
class RequestResult:
    """One finished request of a run: which it was, who sent it, and what it measured."""

    index: int
    """Its place in send order (prompt ``index`` of the seeded stream)."""
    worker: int
    start_s: float
    """When it was sent, in seconds since the run began."""
    measured: Measured
