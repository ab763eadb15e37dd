"""The OpenAI-compatible wire format as vLLM 0.32 serves it: requests parsed, bodies built.

Pure: dictionaries in, dictionaries out, no I/O. Shapes follow vLLM 0.32's
``entrypoints/openai/{completion,chat_completion}/protocol.py`` and
``serve/engine/protocol.py``: ``cmpl-``/``chatcmpl-`` ids, ``usage`` with
``prompt_tokens``, ``completion_tokens`` and ``total_tokens``, stream chunks
of ``object`` ``text_completion`` / ``chat.completion.chunk``, the final
usage chunk (empty ``choices``) when ``stream_options.include_usage`` is
set, and errors as ``{"error": {"message", "type", "param", "code"}}`` (404
``NotFoundError`` for a model not served, 400 for a body that does not
parse or validate).

The emulator serves one prompt and one choice per request (``n`` = 1); a
sampling parameter it has no use for (temperature, top_p, stop, ...) is
accepted and has no effect: the output is fake words (``text``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from e2e.emulated.text import chat_tokens, count_tokens


class ApiError(Exception):
    """An error response: status code and vLLM's error body."""

    def __init__(
        self,
        status: HTTPStatus,
        message: str,
        *,
        err_type: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type or status.phrase
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": int(self.status),
            }
        }


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A request vLLM's validation refuses (its ``BadRequestError``)."""
    return ApiError(HTTPStatus.BAD_REQUEST, message, err_type="BadRequestError", param=param)


def model_not_found(model: str, served: tuple[str, ...]) -> ApiError:
    return ApiError(
        HTTPStatus.NOT_FOUND,
        f"The model `{model}` does not exist. Valid aliases: {', '.join(served)}.",
        err_type="NotFoundError",
        param="model",
    )


@dataclass(frozen=True)
class ParsedRequest:
    """A completion or chat request, validated."""

    chat: bool
    model: str | None
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool
    min_tokens: int


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or vLLM's 400 for JSON that does not parse."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, f"1 validation error:\n  JSON decode error: {err}", param="body"
        ) from None
    if not isinstance(doc, dict):
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            f"1 validation error:\n  body: expected a JSON object, got {type(doc).__name__}",
            param="body",
        )
    return doc


def parse_completion(doc: dict[str, Any]) -> ParsedRequest:
    """``POST /v1/completions``: ``prompt`` is a string, token ids, or a list of one string."""
    return _parsed(doc, chat=False, prompt_tokens=_prompt_tokens(doc.get("prompt")))


def parse_chat(doc: dict[str, Any]) -> ParsedRequest:
    """``POST /v1/chat/completions``: ``messages`` with string or text-part contents."""
    return _parsed(doc, chat=True, prompt_tokens=_messages_tokens(doc.get("messages")))


def _parsed(doc: dict[str, Any], *, chat: bool, prompt_tokens: int) -> ParsedRequest:
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise _invalid("model", "Input should be a valid string", model)
    max_tokens = doc.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = doc.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    n = doc.get("n", 1)
    if n not in (None, 1):
        raise bad_request(f"n={n!r}: the emulated vLLM serves one choice per request (n=1)", "n")
    stream = _bool(doc, "stream")
    options = doc.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _invalid("stream_options", "Input should be a valid dictionary", options)
    if options is not None and not stream:
        raise bad_request(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    min_tokens = doc.get("min_tokens", 0)
    if type(min_tokens) is not int or min_tokens < 0:
        raise bad_request(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool((options or {}).get("include_usage", False)),
        ignore_eos=_bool(doc, "ignore_eos"),
        min_tokens=min_tokens,
    )


def _bool(doc: dict[str, Any], key: str) -> bool:
    value = doc.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _invalid(key, "Input should be a valid boolean", value)
    return value


def _invalid(field: str, message: str, value: object) -> ApiError:
    return ApiError(
        HTTPStatus.BAD_REQUEST,
        f"1 validation error:\n  {{'loc': ('body', '{field}'), 'msg': '{message}', "
        f"'input': {value!r}}}",
        param=f"body.{field}",
    )


def _prompt_tokens(prompt: object) -> int:
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return count_tokens(prompt[0])
    if isinstance(prompt, list) and len(prompt) > 1:
        raise bad_request("the emulated vLLM serves one prompt per request", "prompt")
    why = "Field required" if prompt is None else "Input should be a valid string"
    raise _invalid("prompt", why, prompt)


def _messages_tokens(messages: object) -> int:
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "Input should be a non-empty list", messages)
    contents = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _invalid(f"messages.{i}", "Input should be an object with a role", message)
        contents.append(_content_text(message.get("content"), i))
    return chat_tokens(contents)


def _content_text(content: object, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                raise bad_request(
                    f"messages[{index}]: the emulated vLLM takes text content parts only",
                    "messages",
                )
        return " ".join(parts)
    raise _invalid(f"messages.{index}.content", "Input should be a valid string", content)


def context_check(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """The tokens the request may generate, or vLLM's 400 when it cannot fit the context."""
    if prompt_tokens >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the "
            "input messages.",
            "input_tokens",
        )
    room = max_model_len - prompt_tokens
    if max_tokens is None:
        return room
    if max_tokens > room:
        raise bad_request(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {prompt_tokens}).",
            "max_tokens",
        )
    return max_tokens


# --- bodies -----------------------------------------------------------------


def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def completion_body(
    rid: str, created: int, model: str, text: str, finish: str, use: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": use,
        "kv_transfer_params": None,
    }


def chat_body(
    rid: str, created: int, model: str, text: str, finish: str, use: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": use,
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }


def stream_chunk(
    chat: bool,
    rid: str,
    created: int,
    model: str,
    text: str,
    finish: str | None,
    *,
    first: bool = False,
) -> dict[str, Any]:
    """One SSE chunk; chat's first carries the assistant role."""
    choice: dict[str, Any] = {"index": 0}
    if chat:
        delta: dict[str, Any] = {"content": text}
        if first:
            delta = {"role": "assistant", "content": text}
        choice["delta"] = delta
    else:
        choice["text"] = text
    choice.update({"logprobs": None, "finish_reason": finish, "stop_reason": None})
    return {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def usage_chunk(
    chat: bool, rid: str, created: int, model: str, use: dict[str, Any]
) -> dict[str, Any]:
    """The last chunk of a stream with ``include_usage``: no choices, the usage."""
    return {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": use,
    }


def models_body(served: tuple[str, ...], root: str, max_model_len: int) -> dict[str, Any]:
    """``GET /v1/models``: one card per served name."""
    now = int(time.time())
    return {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "vllm",
                "root": root,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": now,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in served
        ],
    }
