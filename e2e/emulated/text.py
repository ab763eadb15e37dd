"""Fake tokens: counting a prompt's tokens and writing output text, with no tokenizer.

The emulator has no model files, so a "token" is a whitespace-separated
word: a prompt of 12 words is 12 prompt tokens, and every generated token is
one word (`` word``, with its leading space), so ``len(text.split())`` of an
answer equals its ``completion_tokens``. A chat prompt adds what a chat
template would: ``MESSAGE_OVERHEAD`` tokens per message (role markers) and
``REPLY_PRIMER`` for the assistant turn. The sizes are not a real
tokenizer's (about 1.3 tokens per English word); the counts are exact and
consistent between ``usage`` and the metrics, which is what tests need.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

MESSAGE_OVERHEAD = 4
REPLY_PRIMER = 3
WORDS = tuple(
    " ".join(
        (
            "the model emulated tokens decode draft verify accept batch step speculative",
            "kernel cache prefill latency throughput schedule profile table policy pool",
            "replica cluster request stream answer token context memory bandwidth compute",
            "graph head lookup sample window signal metric probe drain ready value state",
        )
    ).split()
)


def count_tokens(text: str) -> int:
    """Prompt tokens of ``text``: its words (at least 1: an empty prompt still has BOS)."""
    return max(1, len(text.split()))


def chat_tokens(contents: Iterable[str]) -> int:
    """Prompt tokens of a chat: each message's words plus the template's markers."""
    total = REPLY_PRIMER
    for content in contents:
        total += len(content.split()) + MESSAGE_OVERHEAD
    return total


class WordSource:
    """Output words for one request, from its own seeded generator."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def take(self, n: int) -> list[str]:
        """``n`` tokens' text, each a word with its leading space."""
        choice = self._rng.choice
        return [" " + choice(WORDS) for _ in range(n)]
