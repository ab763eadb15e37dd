"""Events in, outcome and token timings out, on literal lines and times (no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specdeploy.cli.loadgen.results import from_stream, tpot
from specdeploy.cli.loadgen.stats import distribution_ms, percentile
from specdeploy.cli.loadgen.stream import StreamProtocolError, StreamState


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n".encode()


def _chat(text: str) -> bytes:
    return _data({"choices": [{"index": 0, "delta": {"content": text}}]})


ROLE = _data({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
DONE = b"data: [DONE]\n"


def _feed(lines: list[tuple[bytes, float]]) -> StreamState:
    state = StreamState()
    for line, now in lines:
        state.feed(line, now)
    return state


def test_ttft_and_tpot_follow_the_text_chunks_and_the_usage_count() -> None:
    # Sent at 10.0; the role chunk carries no text; 4 tokens in 3 chunks (one of 2, as
    # speculative decoding sends), usage says 4: TPOT = (10.9 - 10.3) / (4 - 1).
    state = _feed(
        [
            (ROLE, 10.1),
            (b"\n", 10.1),
            (_chat("a"), 10.3),
            (_chat("b c"), 10.6),
            (_chat("d"), 10.9),
            (_data({"choices": [], "usage": {"completion_tokens": 4}}), 10.95),
            (DONE, 11.0),
        ]
    )
    m = from_stream(state, sent_at=10.0, ended_at=11.0, status=200)
    assert m.ok and m.output_tokens == 4 and m.tokens_from == "usage"
    assert m.ttft_s == pytest.approx(0.3)
    assert m.tpot_s == pytest.approx(0.2)
    assert m.latency_s == pytest.approx(1.0)


def test_without_usage_the_text_chunks_are_the_tokens() -> None:
    state = _feed([(_chat("a"), 1.0), (_chat("b"), 1.5), (DONE, 1.6)])
    m = from_stream(state, sent_at=0.5, ended_at=1.6, status=200)
    assert (m.output_tokens, m.tokens_from) == (2, "chunks")
    assert m.tpot_s == pytest.approx(0.5)


def test_completions_text_counts_and_comments_are_ignored() -> None:
    state = _feed([(b": keep-alive\n", 0.1), (_data({"choices": [{"text": "x"}]}), 0.2)])
    state.feed(DONE, 0.3)
    assert (state.text_chunks, state.first_token_at, state.done) == (1, 0.2, True)


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        pytest.param([(_chat("a"), 1.0)], "broken_stream", id="no-done"),
        pytest.param(
            [(_chat("a"), 1.0), (_data({"error": {"message": "engine died"}}), 1.1)],
            "stream_error",
            id="error-event",
        ),
        pytest.param([(ROLE, 1.0), (DONE, 1.1)], "no_tokens", id="done-without-text"),
    ],
)
def test_a_stream_that_did_not_finish_well_fails_by_kind(
    lines: list[tuple[bytes, float]], reason: str
) -> None:
    m = from_stream(_feed(lines), sent_at=0.0, ended_at=2.0, status=200)
    assert m.reason == reason and not m.ok


@pytest.mark.parametrize("line", [b"data: {not json\n", b"data: [1, 2]\n"])
def test_an_event_that_is_not_a_json_object_is_a_protocol_error(line: bytes) -> None:
    with pytest.raises(StreamProtocolError):
        StreamState().feed(line, 0.0)


def test_tpot_is_undefined_below_two_tokens() -> None:
    assert tpot(1.0, 1.0, 1) is None
    assert tpot(None, None, 5) is None
    assert tpot(1.0, 2.0, 3) == pytest.approx(0.5)


def test_percentiles_interpolate_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_distributions_are_reported_in_milliseconds() -> None:
    figures = distribution_ms([0.010, 0.020, 0.030])
    assert figures == {"p50": 20.0, "p90": 28.0, "p99": 29.8, "mean": 20.0, "count": 3}
    assert distribution_ms([])["p50"] is None
