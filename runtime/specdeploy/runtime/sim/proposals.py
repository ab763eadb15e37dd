"""How many drafts a drafter proposes per sequence-step: K, or fewer, or none.

EAGLE heads and draft models always propose the K tokens they are asked for.
Lookup drafters (n-gram prompt lookup, suffix decoding) propose only when
the text being generated repeats something in the context: in the shipped
SmolLM2 n-gram profile only 28% of sequence-steps had any draft, and once a
match was found it usually ran for all K (``shared/reviews/dsd.md`` S1-1).
How often a proposal exists is a property of the *workload*, like
acceptance: chat repeats little, code edits and "rewrite the above" repeat a
lot.

``LookupProposals`` models it with two numbers: a proposal exists with
probability ``rate`` per sequence-step, and a match, once found, extends one
more token with probability ``continuation`` (so its length given K is
min(K, 1 + Geometric)). Its survival s_i = P(L >= i) = rate * continuation^(i-1)
prices the verified tokens (a sequence verifies 1 + L), and its drafting rate
q_i = proposed / reached (``goodput`` module) is (rate, continuation, ...):
a reached position beyond the first implies the earlier ones were proposed.

Lengths come from two uniforms per slot and step (whether a proposal
exists, how long it runs) that the engine draws whatever K is chosen, so two
policies with one seed see one stream. All figures are modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.sim.acceptance import count_accepted

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class ProposalModel(Protocol):
    """The proposal-length distribution of one drafter on one workload."""

    @property
    def always_full(self) -> bool:
        """True when every sequence-step proposes all K drafts (no uniforms needed)."""
        ...

    def survival(self, positions: int) -> tuple[float, ...]:
        """s_i = P(proposal length >= i | K >= i) for i = 1..positions."""
        ...

    def drafting_rate(self, positions: int) -> tuple[float, ...]:
        """q_i = P(position i proposed | position i reached) for i = 1..positions."""
        ...

    def lengths(self, exists_u: FloatArray, length_u: FloatArray, k: int) -> IntArray:
        """Proposal length per slot at draft length ``k`` from the slot's two uniforms."""
        ...


@dataclass(frozen=True)
class FullProposals:
    """EAGLE, EAGLE-3, MTP and draft models: K drafts on every sequence-step."""

    @property
    def always_full(self) -> bool:
        return True

    def survival(self, positions: int) -> tuple[float, ...]:
        return (1.0,) * positions

    def drafting_rate(self, positions: int) -> tuple[float, ...]:
        return (1.0,) * positions

    def lengths(self, exists_u: FloatArray, length_u: FloatArray, k: int) -> IntArray:
        return np.full(exists_u.shape, k, dtype=np.int64)


@dataclass(frozen=True)
class LookupProposals:
    """n-gram and suffix drafters: a proposal with probability ``rate``, of geometric length."""

    rate: float
    continuation: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0 or not 0.0 <= self.continuation <= 1.0:
            raise ValueError(f"rate and continuation must lie in [0, 1]: {self}")

    @property
    def always_full(self) -> bool:
        return self.rate >= 1.0 and self.continuation >= 1.0

    def survival(self, positions: int) -> tuple[float, ...]:
        return tuple(self.rate * self.continuation**i for i in range(positions))

    def drafting_rate(self, positions: int) -> tuple[float, ...]:
        return tuple(self.rate if i == 0 else self.continuation for i in range(positions))

    def lengths(self, exists_u: FloatArray, length_u: FloatArray, k: int) -> IntArray:
        if k <= 0:
            return np.zeros(exists_u.shape, dtype=np.int64)
        extend = np.cumprod(np.full(k - 1, self.continuation))
        run = 1 + count_accepted(extend, length_u, k - 1)
        out: IntArray = np.where(exists_u < self.rate, run, 0).astype(np.int64)
        return out


ALWAYS_FULL = FullProposals()
CHAT_LOOKUP = LookupProposals(rate=0.3)
"""n-gram lookup on chat traffic: a draft on ~30% of sequence-steps, as measured."""
CODE_LOOKUP = LookupProposals(rate=0.6, continuation=0.95)
"""n-gram lookup on code edits and rewrites, which repeat their context (modelled)."""


def effective_rates(
    given_proposal: tuple[float, ...], proposals: ProposalModel
) -> tuple[float, ...]:
    """a_i with a missing draft counted as a rejection: q_i times the rate given a proposal."""
    q = proposals.drafting_rate(len(given_proposal))
    return tuple(a * r for a, r in zip(given_proposal, q, strict=True))
