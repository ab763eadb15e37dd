"""The contract between whoever runs steps (vLLM add-on, simulator) and a K policy.

The engine asks ``choose_k(batch_size)`` once per step, on the hot path, and
reports what happened with ``observe(step)`` after it. Everything a policy
learns arrives in the ``StepRecord``; nothing else is shared.

The record carries what the add-on reads off vLLM's step objects: the
per-position counts of ``goodput.reached_counts`` (a position the drafter
did not propose counts as rejected), the tokens actually verified and the
context read, and the step's time when it is a clean decode step (no
prefill; the add-on times no other step, so the simulator must not either).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable


class StepRecord(NamedTuple):
    """One finished engine step, as a policy sees it.

    Per-position lists have one entry per draft position 1..K (``k``
    entries, or fewer; empty at K=0). ``verified_tokens`` sums 1 + proposal
    length over the decoding sequences; ``context_tokens`` sums their
    context lengths (KV entries read). ``step_seconds`` is None for a step
    that is not a clean decode step (a prefill rode along, or it was not
    timed).
    """

    batch_size: int
    k: int
    step_seconds: float | None
    reached: Sequence[int] = ()
    proposed: Sequence[int] = ()
    accepted: Sequence[int] = ()
    decode_sequences: int = 0
    verified_tokens: int = 0
    context_tokens: int = 0
    offered: Sequence[int] = ()
    scheduled: Sequence[int] = ()


@runtime_checkable
class KPolicy(Protocol):
    """Chooses the number of draft tokens K for each engine step."""

    name: str

    def choose_k(self, batch_size: int) -> int:
        """K for a step with ``batch_size`` scheduled sequences. Hot path: O(1)."""
        ...

    def observe(self, step: StepRecord) -> None:
        """Feed back one finished step."""
        ...
