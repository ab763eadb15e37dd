"""The contract between the profiler's search and whatever runs the steps.

A backend runs fixed-size batches: ``measure(batch_size, k, steps)`` keeps
exactly ``batch_size`` sequences decoding at draft length ``k`` (K=0: no
drafts verified) for ``steps`` steps after its own warm-up, and returns the
per-step times and the per-position draft counts. The search decides which
cells to measure and how often to repeat them; the backend only measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specdeploy.runtime.profile import Fingerprint, Source


class DeterministicFailure(RuntimeError):
    """A failure that will happen again on retry (model missing, OOM at the
    smallest batch, invalid arguments): the Job must not be retried."""

    def __init__(self, reason: str, *, exit_code: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code


@dataclass(frozen=True)
class CellSample:
    """One ``measure`` call: per-step seconds and conditional draft counts.

    ``drafted[i]`` counts sequences whose draft position i+1 was verified
    with positions 1..i all accepted; ``accepted[i]`` how many of those
    accepted position i+1 (kpolicy.py explains the denominators).
    """

    batch_size: int
    k: int
    step_seconds: Sequence[float]
    drafted: Sequence[int] = field(default_factory=tuple)
    accepted: Sequence[int] = field(default_factory=tuple)


class ProfilerBackend(Protocol):
    """Runs fixed-size batches on one engine (simulated or real)."""

    name: str
    source: Source
    """``modelled`` for the simulator, ``measured`` for a real engine."""

    def fingerprint(self) -> Fingerprint:
        """What the resulting profile is keyed by (model, draft, hardware, engine, maxK)."""
        ...

    def measure(self, batch_size: int, k: int, steps: int) -> CellSample:
        """Run ``steps`` decode steps of ``batch_size`` sequences at draft length ``k``.

        Raises DeterministicFailure for failures that retrying cannot fix.
        """
        ...

    def close(self) -> None:
        """Release the engine (processes, memory)."""
        ...
