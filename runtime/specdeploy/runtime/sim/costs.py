"""Step cost: the wall time of one engine step (draft + verify + overheads).

A step verifies T = sum over decoding sequences of (K + 1) tokens plus the
prompt tokens of requests prefilling in the same step. The target forward
is priced by the kernel-class roofline (``roofline.py``); the drafter adds
its own passes (``drafts.py``); the engine adds host-side costs that a GPU
roofline does not see. Three modes:

- vanilla (no speculation configured): target forward + engine overheads;
- speculation configured, K >= 1: + K draft passes + speculation overheads;
- speculation configured, K = 0: + what the drafter still runs at K=0 +
  speculation overheads. REFERENCE.md: with K pinned to 0, vLLM cost +6.6%
  TPOT at concurrency 2 and +21.6% at 189 over no speculation.

All figures are modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdeploy.runtime.sim.drafts import Drafter
from specdeploy.runtime.sim.hardware import GPU
from specdeploy.runtime.sim.models import TransformerModel
from specdeploy.runtime.sim.roofline import ForwardCost, Roofline


@dataclass(frozen=True)
class Overheads:
    """Host-side and launch costs per step (modelled, vLLM V1-like)."""

    step_s: float = 1.5e-3
    """Scheduling, input preparation and output processing not hidden by async scheduling."""
    per_seq_s: float = 4e-6
    """Host bookkeeping per scheduled sequence (detokenisation, stop checks, ...)."""
    per_layer_s: float = 8e-6
    """Per target layer: attention runs eagerly between piecewise CUDA graphs
    (vLLM forces PIECEWISE graphs once a K table is set)."""
    spec_step_s: float = 0.4e-3
    """Speculation configured: rejection sampler, draft bookkeeping, an extra host sync."""
    spec_per_seq_s: float = 3e-6
    """Speculation configured: per-sequence draft token bookkeeping."""


@dataclass(frozen=True)
class StepBreakdown:
    """Where one step's seconds go."""

    target: ForwardCost
    draft: float
    overhead: float

    @property
    def total(self) -> float:
        return self.target.total + self.draft + self.overhead


@dataclass(frozen=True)
class StepCost:
    """Prices engine steps for one target model + drafter on one TP group."""

    gpu: GPU
    model: TransformerModel
    drafter: Drafter | None
    tp: int = 1
    roofline: Roofline | None = None
    overheads: Overheads = field(default_factory=Overheads)

    def __post_init__(self) -> None:
        if self.roofline is None:
            object.__setattr__(self, "roofline", Roofline(self.gpu, self.tp))
        elif self.roofline.gpu != self.gpu or self.roofline.tp != self.tp:
            raise ValueError("roofline must be for the same GPU and TP size")

    @property
    def roof(self) -> Roofline:
        assert self.roofline is not None  # set in __post_init__
        return self.roofline

    def breakdown(
        self,
        decode_seqs: int,
        k: int,
        *,
        context_tokens: float,
        attention_pairs: float | None = None,
        prefill_tokens: float = 0.0,
        prefill_seqs: int = 0,
        speculative: bool = True,
    ) -> StepBreakdown:
        """Cost of one step by part.

        ``context_tokens``: KV tokens read, summed over the scheduled
        sequences. ``attention_pairs``: (query, context) pairs; by default
        every decoding query token attends to its sequence's mean context.
        ``speculative`` False is vanilla: no drafter, no speculation
        overheads, and K must be 0.
        """
        if not speculative and k != 0:
            raise ValueError("vanilla steps (speculative=False) verify no drafts: k must be 0")
        if speculative and self.drafter is None:
            raise ValueError("speculative steps need a drafter")
        roof = self.roof
        verified = decode_seqs * (k + 1)
        tokens = verified + prefill_tokens
        if attention_pairs is None:
            per_seq = context_tokens / max(decode_seqs + prefill_seqs, 1)
            attention_pairs = verified * per_seq + prefill_tokens * per_seq / 2.0
        target = roof.forward(
            self.model, tokens, context_tokens, attention_pairs, verified + prefill_seqs
        )
        seqs = decode_seqs + prefill_seqs
        ov = self.overheads
        overhead = ov.step_s + ov.per_seq_s * seqs + ov.per_layer_s * self.model.layers
        draft = 0.0
        if speculative and self.drafter is not None:
            overhead += ov.spec_step_s + ov.spec_per_seq_s * seqs
            if k > 0:
                draft = self.drafter.draft_seconds(roof, decode_seqs, k, tokens, context_tokens)
            else:
                draft = self.drafter.k0_seconds(roof, decode_seqs, tokens, context_tokens)
        return StepBreakdown(target, draft, overhead)

    def step_seconds(
        self,
        decode_seqs: int,
        k: int,
        *,
        context_tokens: float,
        attention_pairs: float | None = None,
        prefill_tokens: float = 0.0,
        prefill_seqs: int = 0,
        speculative: bool = True,
    ) -> float:
        """Wall seconds of one step: ``breakdown(...).total``, on the engine's hot path."""
        if not speculative and k != 0:
            raise ValueError("vanilla steps (speculative=False) verify no drafts: k must be 0")
        roof = self.roof
        verified = decode_seqs * (k + 1)
        tokens = verified + prefill_tokens
        seqs = decode_seqs + prefill_seqs
        if attention_pairs is None:
            per_seq = context_tokens / max(seqs, 1)
            attention_pairs = verified * per_seq + prefill_tokens * per_seq / 2.0
        total = roof.forward_seconds(
            self.model, tokens, context_tokens, attention_pairs, verified + prefill_seqs
        )
        ov = self.overheads
        total += ov.step_s + ov.per_seq_s * seqs + ov.per_layer_s * self.model.layers
        if speculative:
            if self.drafter is None:
                raise ValueError("speculative steps need a drafter")
            total += ov.spec_step_s + ov.spec_per_seq_s * seqs
            if k > 0:
                total += self.drafter.draft_seconds(roof, decode_seqs, k, tokens, context_tokens)
            else:
                total += self.drafter.k0_seconds(roof, decode_seqs, tokens, context_tokens)
        return total

    def decode_itl(
        self, batch_size: int, k: int, *, context: float = 512.0, speculative: bool = True
    ) -> float:
        """ITL of a pure decode step: ``batch_size`` sequences of ``context`` tokens each."""
        return self.step_seconds(
            batch_size, k, context_tokens=batch_size * context, speculative=speculative
        )
