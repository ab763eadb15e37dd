"""The workloads: seeded, reproducible in send order, and different in kind."""

from __future__ import annotations

import pytest

from specdeploy.cli.loadgen import prompts
from specdeploy.cli.loadgen.prompts import BUILTIN_CHAT, PromptStream, prompt_stream
from specdeploy.runtime.profiler import datasets


def _take(stream: PromptStream, n: int) -> list[str]:
    return [stream.next() for _ in range(n)]


@pytest.mark.parametrize("workload", ["chat", "code", "random"])
def test_the_same_seed_gives_the_same_prompts_and_another_seed_others(workload: str) -> None:
    first = _take(PromptStream(workload, 7), 20)
    assert first == _take(PromptStream(workload, 7), 20)
    assert first != _take(PromptStream(workload, 8), 20)


def test_random_prompts_differ_from_chat_and_from_each_other() -> None:
    chat = _take(prompt_stream("chat", 0), 20)
    random_ = _take(prompt_stream("random", 0), 20)
    assert not set(chat) & set(random_)
    assert len(set(random_)) == 20
    words = random_[0].split("\n", 1)[1].split()
    assert len(words) >= 48 and len(set(words)) > 0.9 * len(words)


def test_code_prompts_carry_the_code_the_answer_repeats() -> None:
    for prompt in _take(PromptStream("code", 3), 10):
        assert "return the complete code" in prompt
        assert "```python\n" in prompt and ("def " in prompt or "class " in prompt)


def test_chat_reads_mt_bench_first_turns_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    conversation = datasets.Conversation("1", ("first turn", "rework your answer"))
    monkeypatch.setattr(datasets, "load_conversations", lambda _name: [conversation])
    stream = prompt_stream("chat", 0)
    assert _take(stream, 3) == ["first turn"] * 3
    assert stream.source.startswith("mt-bench")


def test_chat_falls_back_to_the_built_in_questions_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unavailable(_name: str) -> list[datasets.Conversation]:
        raise datasets.DatasetUnavailable("not installed")

    monkeypatch.setattr(datasets, "load_conversations", unavailable)
    pool, source = prompts.chat_questions()
    assert pool == BUILTIN_CHAT and "MT-Bench not installed" in source
    assert set(_take(prompt_stream("chat", 1), 30)) <= set(BUILTIN_CHAT)
