"""Server-sent events of an OpenAI-style stream in, token timings out (no I/O).

Each event line is ``data: {json}``; the stream ends with ``data: [DONE]``.
A chunk carries output text in ``choices[].delta.content`` (chat; also
``reasoning_content``/``reasoning`` for reasoning models) or
``choices[].text`` (completions). The last chunk, asked for with
``include_usage``, has ``usage.completion_tokens``. A stream that stops
before ``[DONE]`` was cut; an ``{"error": ...}`` event is the server's own
failure report (vLLM sends one when generation fails mid-stream).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"
_DELTA_TEXT_FIELDS = ("content", "reasoning_content", "reasoning")


class StreamProtocolError(ValueError):
    """An event that is not the JSON an OpenAI-style stream sends."""


@dataclass
class StreamState:
    """What the events of one response said so far, with when the tokens came."""

    first_token_at: float | None = None
    last_token_at: float | None = None
    text_chunks: int = 0
    """Chunks that carried output text (the token count when the server sends no usage)."""
    usage_tokens: int | None = None
    done: bool = False
    error: str | None = None

    def feed(self, raw: bytes | str, now: float) -> None:
        """Take one line of the body, received at ``now``."""
        line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line.startswith("data:"):
            return  # blank separators, comments (':'), event:/id: fields
        data = line[len("data:") :].strip()
        if data == DONE:
            self.done = True
            return
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            raise StreamProtocolError(f"event is not JSON: {data[:80]!r}") from None
        if not isinstance(event, dict):
            raise StreamProtocolError(f"event is not a JSON object: {data[:80]!r}")
        self._take(event, now)

    def _take(self, event: dict[str, Any], now: float) -> None:
        if "error" in event:
            error = event["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.error = str(message)[:200]
            return
        if chunk_has_text(event):
            self.text_chunks += 1
            if self.first_token_at is None:
                self.first_token_at = now
            self.last_token_at = now
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]


def chunk_has_text(event: dict[str, Any]) -> bool:
    """Whether any choice of the chunk carries output text (a role-only delta does not)."""
    choices = event.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(f) for f in _DELTA_TEXT_FIELDS):
            return True
    return False
