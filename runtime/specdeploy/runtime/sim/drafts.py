"""Drafters: what proposing K tokens costs per step, and what they usually get accepted.

- EAGLE / EAGLE-3: a one-layer head on the target's hidden states, run K
  times in sequence. The first pass consumes every position the target just
  verified (to extend the head's own KV cache), the next K-1 passes one token
  per sequence. Small, memory-bound, so launch and sampling overhead per pass
  matter as much as the weights. EAGLE-1 reuses the target's LM head (for a
  256k vocabulary that is most of the head's bytes); EAGLE-3 has a 32k draft
  vocabulary and fuses three feature layers.
- Draft model: a small LM of the same family, K sequential passes likewise.
- N-gram: prompt lookup on the CPU, cost proportional to the batch. It
  proposes only where the context repeats (``proposals.LookupProposals``):
  the lookup runs for every sequence, the target verifies only what was
  proposed.

With speculation configured and K=0 the drafter is not free (REFERENCE.md:
vLLM's drafter still runs a synchronous forward to keep its state): model
drafters then pay one pass over the batch. All costs are modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from specdeploy.runtime.sim.acceptance import (
    DRAFT_MODEL_MT_BENCH,
    EAGLE3_MT_BENCH,
    EAGLE_MT_BENCH,
    NGRAM_CHAT,
    AcceptanceModel,
)
from specdeploy.runtime.sim.models import LLAMA_1B, TransformerModel
from specdeploy.runtime.sim.proposals import ALWAYS_FULL, CHAT_LOOKUP, ProposalModel
from specdeploy.runtime.sim.roofline import Roofline


class Drafter(Protocol):
    """A speculation method's cost per step and its usual acceptance."""

    @property
    def method(self) -> str:
        """vLLM's method name: eagle, eagle3, draft_model, ngram."""
        ...

    @property
    def name(self) -> str | None:
        """The draft model's id (None for model-free methods)."""
        ...

    @property
    def acceptance(self) -> AcceptanceModel:
        """The acceptance this method typically gets, given a proposal (a default)."""
        ...

    @property
    def proposals(self) -> ProposalModel:
        """How often and how long it proposes on its usual workload (a default)."""
        ...

    def draft_seconds(
        self, roof: Roofline, seqs: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """Time to propose ``k`` drafts for ``seqs`` decoding sequences (k >= 1)."""
        ...

    def k0_seconds(
        self, roof: Roofline, seqs: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """What the drafter still costs on a step that verifies no drafts."""
        ...


def _model_passes(
    roof: Roofline,
    model: TransformerModel,
    seqs: int,
    passes: int,
    first_tokens: float,
    context_tokens: float,
    pass_overhead_s: float,
) -> float:
    """``passes`` sequential forwards: the first over ``first_tokens``, the rest one per seq."""
    if passes <= 0 or (seqs <= 0 and first_tokens <= 0):
        return 0.0
    ctx_per_seq = context_tokens / max(seqs, 1)
    first = roof.forward_seconds(
        model, first_tokens, context_tokens, first_tokens * ctx_per_seq, seqs
    )
    rest = 0.0
    if passes > 1:
        rest = roof.forward_seconds(model, seqs, context_tokens, seqs * ctx_per_seq, seqs)
    return first + (passes - 1) * rest + passes * pass_overhead_s


@dataclass(frozen=True)
class ModelDrafter:
    """EAGLE/EAGLE-3 heads and draft models: K sequential forwards of a small model."""

    method: str
    name: str | None
    model: TransformerModel
    acceptance: AcceptanceModel
    pass_overhead_s: float = 250e-6
    """Per draft pass: input preparation, launch and greedy sampling on the host side."""
    runs_at_k0: bool = True
    """The drafter's synchronous forward at K=0 (vLLM 0.32 behaviour)."""
    proposals: ProposalModel = field(default=ALWAYS_FULL)
    """A model drafter always proposes K."""

    def draft_seconds(
        self, roof: Roofline, seqs: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        return _model_passes(
            roof, self.model, seqs, k, verified_tokens, context_tokens, self.pass_overhead_s
        )

    def k0_seconds(
        self, roof: Roofline, seqs: int, verified_tokens: float, context_tokens: float
    ) -> float:
        if not self.runs_at_k0:
            return 0.0
        return _model_passes(
            roof, self.model, seqs, 1, verified_tokens, context_tokens, self.pass_overhead_s
        )


@dataclass(frozen=True)
class NgramDrafter:
    """Prompt lookup on the CPU: a fixed cost plus a suffix search per sequence."""

    acceptance: AcceptanceModel = field(default=NGRAM_CHAT)
    proposals: ProposalModel = field(default=CHAT_LOOKUP)
    method: str = "ngram"
    name: str | None = None
    fixed_s: float = 100e-6
    per_seq_s: float = 15e-6
    runs_at_k0: bool = True

    def draft_seconds(
        self, roof: Roofline, seqs: int, k: int, verified_tokens: float, context_tokens: float
    ) -> float:
        return self.fixed_s + self.per_seq_s * seqs if seqs > 0 else 0.0

    def k0_seconds(
        self, roof: Roofline, seqs: int, verified_tokens: float, context_tokens: float
    ) -> float:
        if not self.runs_at_k0 or seqs <= 0:
            return 0.0
        return self.fixed_s + self.per_seq_s * seqs


def eagle_head(target: TransformerModel, name: str) -> ModelDrafter:
    """EAGLE-1: one target-shaped layer, a 2h->h fusion fc, the target's LM head."""
    head = TransformerModel(
        name=name,
        layers=1,
        hidden=target.hidden,
        heads=target.heads,
        kv_heads=target.kv_heads,
        head_dim=target.head_dim,
        intermediate=target.intermediate if not target.is_moe else 4 * target.hidden,
        vocab=target.vocab,
        extra_params=2.0 * target.hidden * target.hidden,
    )
    return ModelDrafter("eagle", name, head, EAGLE_MT_BENCH)


def eagle3_head(target: TransformerModel, name: str, draft_vocab: int = 32000) -> ModelDrafter:
    """EAGLE-3: one layer over fused low/mid/high features, a small draft vocabulary."""
    qkv_on_doubled_input = target.hidden * (target.heads + 2 * target.kv_heads) * target.head_dim
    head = TransformerModel(
        name=name,
        layers=1,
        hidden=target.hidden,
        heads=target.heads,
        kv_heads=target.kv_heads,
        head_dim=target.head_dim,
        intermediate=target.intermediate if not target.is_moe else 4 * target.hidden,
        vocab=draft_vocab,
        extra_params=3.0 * target.hidden * target.hidden + qkv_on_doubled_input,
    )
    return ModelDrafter("eagle3", name, head, EAGLE3_MT_BENCH)


def draft_model(model: TransformerModel = LLAMA_1B) -> ModelDrafter:
    """A separate small LM as drafter (same tokenizer as the target)."""
    return ModelDrafter("draft_model", model.name, model, DRAFT_MODEL_MT_BENCH)


def ngram() -> NgramDrafter:
    """vLLM's n-gram (prompt lookup) proposer."""
    return NgramDrafter()
