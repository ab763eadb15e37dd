"""What a simulator-only policy may see of the engine before it picks K.

A real policy sees the batch size and nothing else before a step
(``policy.base.KPolicy``). The benchmark's oracles are allowed more: the
live number of decoding sequences, their context, the prefill riding along
and the previous K, so that they can price every K with the true step cost
(``oracles.py``). The per-request oracle of the mixed scenario even picks a
K per traffic class. These hooks exist only inside the simulator: nothing in
a pod could implement them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from specdeploy.runtime.policy.base import StepRecord


class StepState(NamedTuple):
    """The engine's state when it asks for K (all counts for the step to come)."""

    batch_size: int
    decode_sequences: int
    context_tokens: int
    """KV tokens the decoding sequences read (their contexts summed)."""
    prefill_tokens: int
    prefill_sequences: int
    prefill_context: int
    """KV the prefill chunks read, their own tokens included."""
    prefill_pairs: float
    """(query, key) pairs of the prefill chunks."""
    previous_k: int
    """K of the previous step (-1 before the first)."""
    step: int
    time: float
    class_counts: tuple[int, ...] = ()
    """Decoding sequences per traffic class (only for a per-class policy on a ``Mixture``)."""


@runtime_checkable
class StatePolicy(Protocol):
    """A policy that picks K from the engine's state (an oracle)."""

    name: str

    def choose_k_for(self, state: StepState) -> int:
        """K for the step about to run."""
        ...

    def observe(self, step: StepRecord) -> None: ...


@runtime_checkable
class PerClassPolicy(Protocol):
    """A policy that gives each traffic class of a ``Mixture`` its own K."""

    name: str

    def choose_class_k(self, state: StepState) -> Sequence[int]:
        """K per class index for the step about to run."""
        ...

    def observe(self, step: StepRecord) -> None: ...
