"""The emulated vLLM server end to end: a subprocess on free ports, spoken to over HTTP.

One server (module-scoped) answers the API-shape, error and metrics tests;
the table reload, the plain-vLLM start-up and the SIGTERM drains each get a
server of their own, since they change or end it. Time runs 50x faster than
real time (``SPECDEPLOY_EMULATED_TIME_SCALE``) except where a test needs a
request to stay in flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.time_scale import scaled
from tests.unit.emulated.server_process import (
    MODEL,
    SERVED,
    Response,
    Server,
    base_env,
    free_port,
    running,
    serve_args,
    value,
    wait_for,
    write_table,
)

SCHEDULE = [[1, 256, 3]]
LABELS = {"model_name": SERVED, "engine": "0"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("emulated")
    write_table(tmp, SCHEDULE)
    port, metrics_port = free_port(), free_port()
    env = base_env(tmp, metrics_port)
    with running(tmp, serve_args(port, SCHEDULE), env, port=port, metrics_port=metrics_port) as s:
        yield s


def complete(server: Server, **body: Any) -> Response:
    return server.post(
        "/v1/completions", {"model": SERVED, "prompt": "one two three four five", **body}
    )


# --- API shapes -------------------------------------------------------------------


def test_the_startup_log_says_it_is_emulated_and_what_it_models(server: Server) -> None:
    log = server.output()
    assert "EMULATED vLLM" in log
    assert "simulator preset llama8b-eagle3-h200 (exact) on GPU NVIDIA-H100-80GB-HBM3" in log
    assert "the specdeploy add-on" in log


def test_models_lists_the_served_name(server: Server) -> None:
    got = server.get("/v1/models")
    assert got.status == 200
    body = got.json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert (card["id"], card["object"], card["root"], card["max_model_len"]) == (
        SERVED, "model", MODEL, 8192,
    )  # fmt: skip


def test_a_completion_with_ignore_eos_returns_max_tokens_words(server: Server) -> None:
    got = complete(server, max_tokens=37, ignore_eos=True)
    assert got.status == 200
    body = got.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["model"] == SERVED
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert len(choice["text"].split()) == 37
    assert body["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 37,
        "total_tokens": 42,
        "prompt_tokens_details": None,
    }


def test_without_ignore_eos_answers_stop_at_a_sampled_length(server: Server) -> None:
    lengths = set()
    for _ in range(4):
        body = complete(server, max_tokens=4000).json()
        (choice,) = body["choices"]
        assert choice["finish_reason"] == "stop"
        n = body["usage"]["completion_tokens"]
        assert 1 <= n < 4000 and len(choice["text"].split()) == n
        lengths.add(n)
    assert len(lengths) > 1  # sampled, not a constant


def test_a_chat_completion_has_the_assistant_message(server: Server) -> None:
    got = server.post(
        "/v1/chat/completions",
        {"model": SERVED, "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 9,
         "ignore_eos": True},
    )  # fmt: skip
    body = got.json()
    assert got.status == 200 and body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].split()) == 9
    # 2 words + 4 per message + 3 for the reply (text.py)
    assert body["usage"]["prompt_tokens"] == 9 and body["usage"]["completion_tokens"] == 9


def test_a_chat_stream_sends_role_deltas_finish_usage_and_done(server: Server) -> None:
    got = server.post(
        "/v1/chat/completions",
        {"model": SERVED, "messages": [{"role": "user", "content": "go"}], "max_tokens": 25,
         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}},
    )  # fmt: skip
    assert got.status == 200 and got.headers["Content-Type"].startswith("text/event-stream")
    events = got.events()
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in [*chunks, usage]}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert len(text.split()) == 25
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 25
    assert len(chunks) > 2  # one chunk per engine step, not one for all


def test_a_completion_stream_without_usage_ends_with_done(server: Server) -> None:
    events = complete(server, max_tokens=12, ignore_eos=True, stream=True).events()
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all("usage" not in c or c["usage"] is None for c in chunks)
    assert len("".join(c["choices"][0]["text"] for c in chunks).split()) == 12
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("body", "headers", "status", "param"),
    [
        pytest.param({"model": "nope", "prompt": "x"}, {}, 404, "model", id="unknown model"),
        pytest.param(b"{not json", {}, 400, "body", id="bad JSON"),
        pytest.param({"model": SERVED}, {}, 400, "body.prompt", id="no prompt"),
        pytest.param({"prompt": "x", "max_tokens": 0}, {}, 400, "max_tokens", id="max_tokens 0"),
        pytest.param({"prompt": "x", "max_tokens": 9000}, {}, 400, "max_tokens", id="too long"),
        pytest.param({"prompt": "x", "n": 2}, {}, 400, "n", id="n=2"),
        pytest.param({"prompt": "x", "stream": "yes"}, {}, 400, "body.stream", id="bad stream"),
        pytest.param(
            {"prompt": "x"}, {"X-Specdeploy-Workload": "poetry"}, 400, None, id="bad workload"
        ),
    ],
)
def test_bad_input_gets_vllms_error_shape(
    server: Server, body: Any, headers: dict[str, str], status: int, param: str | None
) -> None:
    got = server.request("POST", "/v1/completions", body, headers)
    assert got.status == status
    error = got.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["param"] == param and error["message"]
    if status == 404:
        assert error["type"] == "NotFoundError"
        assert error["message"].startswith("The model `nope` does not exist.")


def test_an_unnamed_model_is_the_served_one(server: Server) -> None:
    got = server.post("/v1/completions", {"prompt": "a b", "max_tokens": 2})
    assert got.status == 200 and got.json()["model"] == SERVED


# --- metrics ----------------------------------------------------------------------


def test_vllm_metrics_have_vllms_names_and_labels_and_move(server: Server) -> None:
    before = server.metrics()
    body = complete(server, max_tokens=50, ignore_eos=True).json()
    after = server.metrics()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **LABELS, **labels) - value(before, name, **LABELS, **labels)

    assert delta("vllm:generation_tokens_total") == 50
    assert delta("vllm:prompt_tokens_total") == body["usage"]["prompt_tokens"]
    assert delta("vllm:request_success_total", finished_reason="length") == 1
    assert delta("vllm:request_success_total", finished_reason="stop") == 0
    drafts = delta("vllm:spec_decode_num_drafts_total")
    draft_tokens = delta("vllm:spec_decode_num_draft_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and draft_tokens == 3 * drafts  # K=3 from the table, EAGLE-3 drafts K
    assert 0 < accepted <= draft_tokens
    per_pos = [
        delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
        for i in range(5)
    ]
    assert sum(per_pos) == accepted and per_pos[3:] == [0, 0]
    assert per_pos[0] >= per_pos[1] >= per_pos[2]
    for hist in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
    ):
        assert delta(hist + "_count") == 1
    assert delta("vllm:inter_token_latency_seconds_count") > 0
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        assert value(after, gauge, **LABELS) == 0


def test_random_traffic_collapses_acceptance_against_chat(server: Server) -> None:
    def acceptance(workload: str) -> float:
        before = server.metrics()
        for _ in range(6):
            got = server.post(
                "/v1/completions",
                {"model": SERVED, "prompt": "p", "max_tokens": 60, "ignore_eos": True},
                X_Specdeploy_Workload=workload,
            )
            assert got.status == 200
        after = server.metrics()
        took = value(after, "vllm:spec_decode_num_accepted_tokens_total") - value(
            before, "vllm:spec_decode_num_accepted_tokens_total"
        )
        drafted = value(after, "vllm:spec_decode_num_draft_tokens_total") - value(
            before, "vllm:spec_decode_num_draft_tokens_total"
        )
        return took / drafted

    chat, code, random = acceptance("chat"), acceptance("code"), acceptance("random")
    # EAGLE-3 at K=3 accepts ~0.64 of its drafts on chat, ~0.73 on code, ~0.01 on random;
    # chat against code at this sample size is the drafting tests' job
    assert random < 0.1 and chat > 0.4 and code > 0.4


def test_the_addon_chooses_k_and_exports_its_metrics_on_loopback(server: Server) -> None:
    complete(server, max_tokens=20, ignore_eos=True)
    addon = server.addon_metrics()
    pool = {"pool": "NVIDIA-H100-80GB-HBM3"}
    assert value(addon, "specdeploy_table_generation", **pool) == 1
    assert value(addon, "specdeploy_steps_total", k="3", **pool) > 0
    assert value(addon, "specdeploy_steps_total", k="1", **pool) == 0
    assert value(addon, "specdeploy_draft_tokens_total", **pool) > 0


# --- a table change, plain vLLM, start-up ---------------------------------------------


def test_a_new_table_changes_k_without_a_restart(tmp_path: Path) -> None:
    write_table(tmp_path, SCHEDULE)
    port, metrics_port = free_port(), free_port()
    env = base_env(tmp_path, metrics_port)
    with running(
        tmp_path, serve_args(port, SCHEDULE), env, port=port, metrics_port=metrics_port
    ) as s:
        complete(s, max_tokens=30, ignore_eos=True)
        before = s.addon_metrics()
        assert value(before, "specdeploy_table_generation") == 1
        write_table(tmp_path, [[1, 256, 1]])
        deadline = time.monotonic() + 10
        while value(s.addon_metrics(), "specdeploy_table_generation") < 2:
            assert time.monotonic() < deadline, s.output()
            time.sleep(0.05)
        complete(s, max_tokens=30, ignore_eos=True)
        after = s.addon_metrics()
        assert value(after, "specdeploy_steps_total", k="1") > 0
        assert value(after, "specdeploy_steps_total", k="3") == value(
            before, "specdeploy_steps_total", k="3"
        )
        assert s.proc.poll() is None  # no restart
    assert "table 2 in force" in s.output()


def test_without_a_speculative_config_it_is_plain_vllm_and_503_while_loading(
    tmp_path: Path,
) -> None:
    port, metrics_port = free_port(), free_port()
    env = base_env(tmp_path, metrics_port, SPECDEPLOY_EMULATED_LOAD_SECONDS="1.0")
    args = serve_args(port, None, extra=["--enforce-eager", "--gpu-memory-utilization", "0.9"])
    with running(tmp_path, args, env, port=port, metrics_port=metrics_port, wait_ready=False) as s:
        wait_for(s, 503)
        refused = complete(s, max_tokens=3)
        assert refused.status == 503 and refused.json()["error"]["code"] == 503
        wait_for(s, 200)
        body = complete(s, max_tokens=10, ignore_eos=True).json()
        assert body["usage"]["completion_tokens"] == 10
        names = {name for name, _ in s.metrics()}
        assert "vllm:generation_tokens_total" in names
        assert not any(n.startswith("vllm:spec_decode") for n in names)
        with pytest.raises(OSError):  # no add-on, so no add-on endpoint
            s.request("GET", "/metrics", port=metrics_port, timeout=2)
    log = s.output()
    assert "no speculation (plain vLLM, K=0)" in log
    assert (
        "ignoring arguments it does not model: --enforce-eager --gpu-memory-utilization 0.9" in log
    )


# --- SIGTERM ------------------------------------------------------------------------


def _in_background(
    s: Server, bodies: list[dict[str, Any]]
) -> tuple[list[threading.Thread], list[Response | None]]:
    """Send each body from a thread of its own; return once all are running in the engine."""
    out: list[Response | None] = [None] * len(bodies)

    def send(i: int, body: dict[str, Any]) -> None:
        out[i] = complete(s, **body)

    threads = [threading.Thread(target=send, args=(i, b)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while value(s.metrics(), "vllm:num_requests_running") < len(bodies):
        assert time.monotonic() < deadline, s.output()
        time.sleep(0.01)
    return threads, out


def test_sigterm_drains_in_flight_requests_and_aborts_what_outlives_the_timeout(
    tmp_path: Path,
) -> None:
    write_table(tmp_path, SCHEDULE)
    port, metrics_port = free_port(), free_port()
    env = base_env(tmp_path, metrics_port, SPECDEPLOY_EMULATED_TIME_SCALE="1.0")
    args = [a if not a.startswith("--shutdown-timeout") else "--shutdown-timeout=3"
            for a in serve_args(port, SCHEDULE)]  # fmt: skip
    with running(tmp_path, args, env, port=port, metrics_port=metrics_port) as s:
        # at real time, steps of ~8 ms: 400 tokens take ~1.3 s, 4000 far over the 3 s allowed
        threads, out = _in_background(
            s,
            [{"max_tokens": 400, "ignore_eos": True, "stream": True},
             {"max_tokens": 4000, "ignore_eos": True}],
        )  # fmt: skip
        started = time.monotonic()
        s.proc.send_signal(15)
        wait_for(s, 503)
        assert complete(s, max_tokens=3).status == 503  # new work refused while draining
        assert s.proc.poll() is None
        for t in threads:
            t.join(timeout=30)
        assert s.proc.wait(timeout=30) == 0
        assert time.monotonic() - started < scaled(10)
    drained, aborted = out
    assert drained is not None and aborted is not None
    events = drained.events()
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert len("".join(e["choices"][0]["text"] for e in events[:-1]).split()) == 400
    body = aborted.json()
    assert body["choices"][0]["finish_reason"] == "abort"
    assert 0 < body["usage"]["completion_tokens"] < 4000
    log = s.output()
    assert "shutting down, 2 request(s) in flight, drain timeout 3s" in log
    assert "aborted 1 request(s)" in log
