"""The wire format, pure: requests parsed and checked, bodies built."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.emulated.protocol import (
    ApiError,
    context_check,
    parse_chat,
    parse_completion,
    parse_json,
    stream_chunk,
)
from e2e.emulated.text import MESSAGE_OVERHEAD, REPLY_PRIMER, WordSource, count_tokens


def test_prompt_tokens_count_words_and_token_ids() -> None:
    assert parse_completion({"prompt": "a b  c\nd"}).prompt_tokens == 4
    assert parse_completion({"prompt": [5, 6, 7]}).prompt_tokens == 3
    assert parse_completion({"prompt": ["one two"]}).prompt_tokens == 2
    assert count_tokens("") == 1


def test_chat_prompt_tokens_add_the_templates_markers() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one two three"}]},
    ]
    got = parse_chat({"messages": messages, "max_completion_tokens": 7})
    assert got.prompt_tokens == 5 + 2 * MESSAGE_OVERHEAD + REPLY_PRIMER
    assert got.max_tokens == 7 and got.chat


def test_stream_options_and_flags() -> None:
    got = parse_completion(
        {"prompt": "x", "stream": True, "stream_options": {"include_usage": True},
         "ignore_eos": True, "min_tokens": 3, "temperature": 0.7}
    )  # fmt: skip
    assert (got.stream, got.include_usage, got.ignore_eos, got.min_tokens) == (True, True, True, 3)


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        pytest.param({}, "body.prompt", id="no prompt"),
        pytest.param({"prompt": ["a", "b"]}, "prompt", id="two prompts"),
        pytest.param({"prompt": "x", "max_tokens": -1}, "max_tokens", id="negative"),
        pytest.param({"prompt": "x", "max_tokens": 2.5}, "max_tokens", id="float"),
        pytest.param({"prompt": "x", "stream_options": {}}, "stream_options", id="no stream"),
        pytest.param({"prompt": "x", "ignore_eos": 1}, "body.ignore_eos", id="not bool"),
        pytest.param({"prompt": "x", "model": 3}, "body.model", id="model not str"),
    ],
)
def test_invalid_completions_name_the_parameter(doc: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_completion(doc)
    assert err.value.status == 400 and err.value.param == param


@pytest.mark.parametrize(
    "messages",
    [
        None,
        [],
        ["hi"],
        [{"content": "no role"}],
        [{"role": "user", "content": [{"type": "image_url"}]}],
    ],
)
def test_invalid_chats_are_refused(messages: object) -> None:
    with pytest.raises(ApiError) as err:
        parse_chat({"messages": messages})
    assert err.value.status == 400


def test_bad_json_is_a_400_with_vllms_shape() -> None:
    with pytest.raises(ApiError) as err:
        parse_json(b"{oops")
    body = err.value.body()
    assert body["error"]["code"] == 400 and body["error"]["type"] == "Bad Request"
    with pytest.raises(ApiError):
        parse_json(b"[1, 2]")


def test_the_context_limit() -> None:
    assert context_check(100, None, 8192) == 8092
    assert context_check(100, 50, 8192) == 50
    with pytest.raises(ApiError, match="maximum context length is 8192") as err:
        context_check(100, 8100, 8192)
    assert err.value.param == "max_tokens"
    with pytest.raises(ApiError) as err:
        context_check(8192, 1, 8192)
    assert err.value.param == "input_tokens"


def test_stream_chunks_have_the_completion_and_chat_shapes() -> None:
    text = stream_chunk(False, "cmpl-1", 1, "m", " a", None)
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == " a"
    first = stream_chunk(True, "chatcmpl-1", 1, "m", "", None, first=True)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    last = stream_chunk(True, "chatcmpl-1", 1, "m", " b", "stop")
    assert last["choices"][0]["delta"] == {"content": " b"}
    assert last["choices"][0]["finish_reason"] == "stop"


def test_words_are_one_per_token_and_seeded() -> None:
    a, b = WordSource(3).take(50), WordSource(3).take(50)
    assert a == b and len("".join(a).split()) == 50
    assert all(w.startswith(" ") and len(w.split()) == 1 for w in a)
    assert WordSource(4).take(50) != a
