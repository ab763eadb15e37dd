"""The contract between whoever runs steps (vLLM add-on, simulator) and a K policy.

The engine asks ``choose_k(batch_size)`` once per step, on the hot path, and
reports what happened with ``observe(...)`` after the step. Everything a
policy learns arrives through ``observe``; nothing else is shared.

The per-position counts ``observe`` receives have conditional denominators
(``goodput.conditional_counts`` defines them).
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
