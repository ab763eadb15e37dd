"""Oracles: what the best possible choice of K would have done, to score real policies against.

A policy inside vLLM sees the batch size and past steps. The oracles here
see what no pod can: the true acceptance in force, the live number of
decoding sequences and their context, and the simulator's own step cost.

* ``StateOracle``: each step, the K with the most tokens per second per
  sequence for the decode part of the step about to run, priced by the true
  cost (verified tokens from the proposal model, the live context, the
  piecewise graphs of a pod with a table). A prefill riding along is left
  out of the choice: it costs the same whatever K, and counting it would
  make extra drafts look cheap exactly when a step is already slow. The
  per-step ratio AL/ITL is throughput-optimal in steady state and is what
  decides a drain's makespan (an RL rollout's stragglers' speed); it is not
  when the batch size alternates step by step (the ratio of sums is not
  the sum of ratios: ``shared/reviews/dsd.md`` S3-10), which no scenario
  here does. A change of K costs ``Overheads.k_switch_s`` once and pays off
  over the steps that follow, so the choice charges it spread over
  ``switch_horizon`` steps (charged whole to one step it would keep the
  oracle on a worse K for good; ignored, it would let the oracle thrash).
* ``FixedClassK`` and ``class_ranking``: one K per traffic class of a
  ``Mixture`` (per-request K, as adaptive-verification methods do), priced
  with drafting done at the largest K and verification per request; the
  mixed scenario simulates the best few pairs in hindsight. (A per-step
  greedy choice per class is no oracle in a closed loop: a class given more
  K finishes sooner and leaves the batch to the slow class.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.goodput import acceptance_lengths, verified_per_sequence
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.sim.acceptance import AcceptanceModel, Mixture
from specdeploy.runtime.sim.proposals import ProposalModel, effective_rates
from specdeploy.runtime.sim.state import StepState
from specdeploy.runtime.sim.step_time import StepCost


class StateOracle:
    """Per-step argmax of tokens/s over K from the true cost at the live state."""

    name = "oracle"

    def __init__(
        self,
        cost: StepCost,
        acceptance: AcceptanceModel,
        proposals: ProposalModel,
        allowed_k: Sequence[int],
        *,
        piecewise: bool = True,
        switch_horizon: int = 50,
    ) -> None:
        if not allowed_k:
            raise ValueError("allowed_k: at least one K")
        self.cost, self.acceptance, self.proposals = cost, acceptance, proposals
        self.allowed = tuple(sorted(set(allowed_k)))
        self.piecewise = piecewise
        self._switch_charge = cost.overheads.k_switch_s * cost.time_scale / max(switch_horizon, 1)
        top = max(self.allowed)
        survival = proposals.survival(top)
        self._verified = [verified_per_sequence(survival, k) for k in range(top + 1)]
        self._rates: tuple[float, ...] | None = None
        self._al = np.ones(top + 1)

    def _lengths(self, state: StepState) -> np.ndarray:
        rates = self.acceptance.rates_at(state.step, state.time)
        if rates != self._rates:
            self._rates = rates
            self._al = acceptance_lengths(effective_rates(rates, self.proposals), max(self.allowed))
        return self._al

    def decode_seconds(self, state: StepState, k: int) -> float:
        """The true cost of the coming step's decode part at draft length ``k`` (no switch)."""
        n, ctx = state.decode_sequences, state.context_tokens
        v = self._verified[k]
        return self.cost.step_seconds(
            n,
            k,
            context_tokens=ctx,
            attention_pairs=v * ctx,
            verified_tokens=n * v,
            piecewise=self.piecewise,
        )

    def choose_k_for(self, state: StepState) -> int:
        if state.decode_sequences == 0:
            # A prefill-only step verifies nothing: keep K rather than pay a switch.
            return state.previous_k if state.previous_k in self.allowed else self.allowed[0]
        al = self._lengths(state)
        best_k, best = self.allowed[0], -math.inf
        for k in self.allowed:
            seconds = self.decode_seconds(state, k)
            if state.previous_k >= 0 and k != state.previous_k:
                seconds += self._switch_charge
            score = float(al[k]) / seconds
            if score > best:
                best_k, best = k, score
        return best_k

    def observe(self, step: StepRecord) -> None:
        """An oracle learns nothing."""


@dataclass
class FixedClassK:
    """One fixed K per traffic class of a ``Mixture`` (per-request K, held for the run)."""

    ks: tuple[int, ...]
    name: str = "per-request"

    def choose_class_k(self, state: StepState) -> Sequence[int]:
        return self.ks

    def observe(self, step: StepRecord) -> None:
        """A fixed choice learns nothing."""


def class_ranking(
    cost: StepCost,
    mixture: Mixture,
    proposals: ProposalModel,
    allowed_k: Sequence[int],
    *,
    batch_size: int,
    context: float,
    piecewise: bool = True,
) -> list[tuple[tuple[int, ...], float]]:
    """Every per-class K, best first, by modelled tokens/s of a pure decode step.

    The batch holds the classes in proportion to their shares; drafting runs
    at the largest K of the step, verification per request (1 + L each).
    """
    allowed = sorted(set(allowed_k))
    top = max(allowed)
    survival = proposals.survival(top)
    verified_at = [verified_per_sequence(survival, k) for k in range(top + 1)]
    lengths = [
        acceptance_lengths(effective_rates(p.per_position, proposals), top) for p in mixture.classes
    ]
    counts = [w * batch_size for w in mixture.shares]
    ranked = []
    for ks in itertools.product(allowed, repeat=len(counts)):
        verified = sum(c * verified_at[k] for c, k in zip(counts, ks, strict=True))
        produced = sum(c * al[k] for c, k, al in zip(counts, ks, lengths, strict=True))
        k_top = max(ks)
        seconds = cost.step_seconds(
            batch_size,
            k_top,
            context_tokens=batch_size * context,
            attention_pairs=verified * context,
            verified_tokens=min(max(verified, batch_size), batch_size * (k_top + 1)),
            piecewise=piecewise,
        )
        ranked.append((tuple(ks), produced / seconds))
    return sorted(ranked, key=lambda kv: -kv[1])
