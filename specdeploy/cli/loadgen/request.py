"""One OpenAI-compatible streaming request, built as a plain value before it is sent.

``stream_options.include_usage`` asks the server for a final chunk with the
token counts: with speculative decoding one chunk may carry several tokens,
so counting chunks would undercount exactly what this tool is there to see.
``X-Specdeploy-Workload`` names the workload class: the local cluster's
emulated vLLM server draws each request's acceptance from it (emulated, no
GPU); a real vLLM ignores the header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.cli.loadgen.config import LoadConfig

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
WORKLOAD_HEADER = "X-Specdeploy-Workload"


@dataclass(frozen=True)
class RequestSpec:
    """Where to POST, with which headers and JSON body."""

    url: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]


def build_request(config: LoadConfig, prompt: str) -> RequestSpec:
    """The request for ``prompt`` under ``config`` (its URL already checked as loopback)."""
    body: dict[str, Any] = {
        "model": config.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": config.max_tokens,
    }
    if config.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if config.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension: every request decodes max_tokens
    headers = {
        WORKLOAD_HEADER: config.workload,
        "Accept": "text/event-stream",
    }
    return RequestSpec(config.url.rstrip("/") + ENDPOINTS[config.api], headers, body)
