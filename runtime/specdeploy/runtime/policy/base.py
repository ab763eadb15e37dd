"""The contract between whoever runs steps (vLLM add-on, simulator) and a K policy.

The engine asks ``choose_k(batch_size)`` once per step, on the hot path, and
reports what happened with ``observe(...)`` after the step. Everything a
policy learns arrives through ``observe``; nothing else is shared.

Denominators: ``drafted[i]`` counts sequences whose draft position ``i + 1``
was verified *and* whose positions ``1..i`` were all accepted, so that
``accepted[i] / drafted[i]`` estimates the conditional acceptance a_{i+1}.
vLLM's own per-position metric divides by all drafts instead, which is
biased as soon as K varies between steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class KPolicy(Protocol):
    """Chooses the number of draft tokens K for each engine step."""

    name: str

    def choose_k(self, batch_size: int) -> int:
        """K for a step with ``batch_size`` scheduled sequences. Hot path: O(1)."""
        ...

    def observe(
        self,
        batch_size: int,
        k: int,
        step_seconds: float | None,
        drafted: Sequence[int],
        accepted: Sequence[int],
    ) -> None:
        """Feed back one finished step (``step_seconds`` None when not timed)."""
        ...


def conditional_counts(accepted_per_seq: Sequence[int], k: int) -> tuple[list[int], list[int]]:
    """Per-position (drafted, accepted) with correct denominators from per-sequence counts.

    ``accepted_per_seq[j]`` is how many of sequence j's K drafts were accepted
    (a prefix, as in verification). Position i (1-based) was "drafted" for a
    sequence when K >= i and its first i-1 drafts were accepted.
    """
    drafted = [0] * k
    accepted = [0] * k
    for n in accepted_per_seq:
        n = min(n, k)
        for i in range(min(n + 1, k)):
            drafted[i] += 1
        for i in range(n):
            accepted[i] += 1
    return drafted, accepted
