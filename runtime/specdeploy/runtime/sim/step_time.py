"""The simulator's true step time: the wall time of one engine step (draft + verify + overheads).

A step verifies T tokens: 1 + L per decoding sequence, L its proposal
length (K for EAGLE and draft models; n-gram and suffix lookups often
propose fewer, or none), plus the prompt tokens of requests prefilling in the
same step. The target forward is priced by the kernel-class roofline
(``roofline.py``); the drafter adds its own passes (``drafts.py``); the
engine adds host-side costs that a GPU roofline does not see. Three modes:

- vanilla (no speculation configured): target forward + engine overheads;
- speculation configured, K >= 1: + the drafter's work + speculation overheads;
- speculation configured, K = 0: + what the drafter still runs at K=0 +
  speculation overheads. REFERENCE.md: with K pinned to 0, vLLM cost +6.6%
  TPOT at concurrency 2 and +21.6% at 189 over no speculation.
- ``plain_k0``: the add-on's vLLM plugin is loaded (a pod's add-on and the
  profiler; ``vllm_addon/plain_step.py``). A K=0 step skips a stateless
  drafter (n-gram), samples with vLLM's plain sampler, and skips the draft
  fetch, so it pays none of the speculation overheads. A model drafter's K=0
  pass, which keeps its state, stays charged. Measured on vLLM's CPU engine
  (``bench/results/k0_anatomy.md``), the plugin's n-gram K=0 step adds
  0.00-0.07 ms to a plain step outside the target's forward (at most 0.2 ms
  at the 95% upper ends). vLLM's own K=0 step adds 0.5-0.9 ms, and EAGLE's
  adds its pass.

Two costs depend on how the pod is configured rather than on the step:

- ``piecewise``: a K table (``num_speculative_tokens_per_batch_size``) makes
  vLLM's V1 model runner fall back to piecewise CUDA graphs, with attention
  run eagerly between them: a per-layer launch cost that vanilla serving and
  a plain fixed K (full graphs) do not pay. Only the table and adaptive
  policies set a table, so only they are charged, and only on V1: vLLM 0.32
  runs V2 for every method it supports, which captures full graphs per K in
  the table (a preset's ``runner`` zeroes ``per_layer_s`` there).
- ``switched``: a step whose K differs from the previous step's selects
  another set of captured graphs and re-plans the draft buffers
  (``Overheads.k_switch_s``), so a policy that thrashes pays for it.

All figures are modelled.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field

from specdeploy.runtime.contract import K0_PASS_DRAFTERS
from specdeploy.runtime.sim.drafts import Drafter
from specdeploy.runtime.sim.hardware import GPU
from specdeploy.runtime.sim.models import TransformerModel
from specdeploy.runtime.sim.roofline import ForwardCost, Roofline

PLAIN_K0_METHODS = frozenset({"ngram"})
"""The drafters whose K=0 pass the add-on's plugin skips: stateless ones
(``vllm_addon.plain_step``); EAGLE, MTP and draft models keep theirs."""


@dataclass(frozen=True)
class Overheads:
    """Host-side and launch costs per step (modelled, vLLM V1-like)."""

    step_s: float = 1.5e-3
    """Scheduling, input preparation and output processing not hidden by async scheduling."""
    per_seq_s: float = 4e-6
    """Host bookkeeping per scheduled sequence (detokenisation, stop checks, ...)."""
    per_layer_s: float = 8e-6
    """Per target layer, only with a K table set on vLLM's V1 model runner:
    attention runs eagerly between piecewise CUDA graphs (V1 forces PIECEWISE
    graphs once a table is set; V2 keeps full graphs)."""
    spec_step_s: float = 0.4e-3
    """Speculation configured: rejection sampler, draft bookkeeping, an extra host sync
    (not on a K=0 step with the add-on's plugin, ``plain_k0``)."""
    spec_per_seq_s: float = 3e-6
    """Speculation configured: per-sequence draft token bookkeeping."""
    k_switch_s: float = 1e-3
    """A step whose K differs from the previous one: another set of captured CUDA
    graphs, draft buffers re-planned, the drafter's state re-synced. Modelled as a
    flat 1 ms; vLLM #49548 saw K flipping 2<->0 every step cut throughput from 232
    to 24-157 tok/s, so this is a lower bound on what thrashing costs."""


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
    time_scale: float = 1.0
    """Every step takes this many times as long: a machine uniformly slower (> 1) or
    faster than the one modelled, K ranking unchanged (the slower-machine scenario)."""
    verify_slope: float = 1.0
    """The target forward's cost of the tokens a step verifies beyond one per decoding
    sequence (their GEMM and logits work at the step's attention) is this many times
    the roofline's: a machine that verifies drafts dearer (> 1) than the one a profile
    was made on, while a step without drafts costs the same (the wrong-machine
    scenario; on vLLM's CPU engine a CPU without AVX-512 is such a machine)."""

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if self.verify_slope <= 0:
            raise ValueError(f"verify_slope must be > 0, got {self.verify_slope}")
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
        verified_tokens: float | None = None,
        piecewise: bool = False,
        switched: bool = False,
        plain_k0: bool = False,
    ) -> StepBreakdown:
        """Cost of one step by part.

        ``context_tokens``: KV tokens read, summed over the scheduled
        sequences. ``attention_pairs``: (query, context) pairs; by default
        every verified token attends to its sequence's mean context.
        ``verified_tokens``: tokens the decoding sequences verify (default
        ``decode_seqs * (k + 1)``, every draft proposed). ``speculative``
        False is vanilla: no drafter, no speculation overheads, and K must be
        0. ``piecewise``, ``switched`` and ``plain_k0``: the module docstring.
        """
        verified, tokens, seqs, pairs = self._shape(
            decode_seqs, k, context_tokens, attention_pairs, prefill_tokens, prefill_seqs,
            speculative, verified_tokens,
        )  # fmt: skip
        target = self.roof.forward(
            self.model, tokens, context_tokens, pairs, verified + prefill_seqs, seqs
        )
        if self.verify_slope != 1.0 and verified > decode_seqs:
            plain = self.roof.forward(
                self.model, tokens - verified + decode_seqs, context_tokens, pairs,
                decode_seqs + prefill_seqs, seqs,
            )  # fmt: skip
            f = self.verify_slope
            target = ForwardCost(
                *(p + f * (t - p) for t, p in zip(astuple(target), astuple(plain), strict=True))
            )
        overhead = self._overhead(seqs, speculative, piecewise, switched, plain_k0 and k == 0)
        draft = (
            self._draft(decode_seqs, k, tokens, context_tokens, plain_k0) if speculative else 0.0
        )
        if self.time_scale != 1.0:
            f = self.time_scale
            target = ForwardCost(*(f * x for x in astuple(target)))
            draft, overhead = f * draft, f * overhead
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
        verified_tokens: float | None = None,
        piecewise: bool = False,
        switched: bool = False,
        plain_k0: bool = False,
    ) -> float:
        """Wall seconds of one step: ``breakdown(...).total``, on the engine's hot path."""
        verified, tokens, seqs, pairs = self._shape(
            decode_seqs, k, context_tokens, attention_pairs, prefill_tokens, prefill_seqs,
            speculative, verified_tokens,
        )  # fmt: skip
        total = self.roof.forward_seconds(
            self.model, tokens, context_tokens, pairs, verified + prefill_seqs, seqs
        )
        if self.verify_slope != 1.0 and verified > decode_seqs:
            plain = self.roof.forward_seconds(
                self.model, tokens - verified + decode_seqs, context_tokens, pairs,
                decode_seqs + prefill_seqs, seqs,
            )  # fmt: skip
            total = plain + self.verify_slope * (total - plain)
        total += self._overhead(seqs, speculative, piecewise, switched, plain_k0 and k == 0)
        if speculative:
            total += self._draft(decode_seqs, k, tokens, context_tokens, plain_k0)
        return total * self.time_scale

    def _shape(
        self,
        decode_seqs: int,
        k: int,
        context_tokens: float,
        attention_pairs: float | None,
        prefill_tokens: float,
        prefill_seqs: int,
        speculative: bool,
        verified_tokens: float | None,
    ) -> tuple[float, float, int, float]:
        """(verified, all tokens, sequences, attention pairs) of a step, validated."""
        if not speculative and k != 0:
            raise ValueError("vanilla steps (speculative=False) verify no drafts: k must be 0")
        if speculative and self.drafter is None:
            raise ValueError("speculative steps need a drafter")
        verified = decode_seqs * (k + 1) if verified_tokens is None else verified_tokens
        if not decode_seqs <= verified <= decode_seqs * (k + 1):
            raise ValueError(
                f"verified_tokens must lie in [{decode_seqs}, {decode_seqs * (k + 1)}], "
                f"got {verified}"
            )
        tokens = verified + prefill_tokens
        seqs = decode_seqs + prefill_seqs
        if attention_pairs is None:
            per_seq = context_tokens / max(seqs, 1)
            attention_pairs = verified * per_seq + prefill_tokens * per_seq / 2.0
        return verified, tokens, seqs, attention_pairs

    def _overhead(
        self, seqs: int, speculative: bool, piecewise: bool, switched: bool, plugged_k0: bool
    ) -> float:
        """Host-side costs; ``plugged_k0``: a K=0 step with the add-on's plugin, which pays
        no speculation overheads (the module docstring)."""
        ov = self.overheads
        total = ov.step_s + ov.per_seq_s * seqs
        if piecewise:
            total += ov.per_layer_s * self.model.layers
        if switched:
            total += ov.k_switch_s
        if speculative and not plugged_k0:
            total += ov.spec_step_s + ov.spec_per_seq_s * seqs
        return total

    def _draft(
        self, decode_seqs: int, k: int, tokens: float, context_tokens: float, plain_k0: bool
    ) -> float:
        assert self.drafter is not None  # _shape refused a speculative step without one
        if k > 0:
            return self.drafter.draft_seconds(self.roof, decode_seqs, k, tokens, context_tokens)
        if plain_k0 and self.drafter.method in PLAIN_K0_METHODS:
            return 0.0
        return self.drafter.k0_seconds(self.roof, decode_seqs, tokens, context_tokens)

    def k0_pass_seconds(
        self, decode_seqs: int, verified_tokens: float, context_tokens: float
    ) -> float:
        """The part of a clean K=0 step the add-on's pods time as the drafter's K=0 pass
        (``vllm_addon.k0_pass``: drafters in ``contract.K0_PASS_DRAFTERS``); 0 for others."""
        drafter = self.drafter
        if drafter is None or drafter.method not in K0_PASS_DRAFTERS:
            return 0.0
        seconds = drafter.k0_seconds(self.roof, decode_seqs, verified_tokens, context_tokens)
        return seconds * self.time_scale

    def decode_itl(
        self,
        batch_size: int,
        k: int,
        *,
        context: float = 512.0,
        speculative: bool = True,
        verified_per_sequence: float | None = None,
        piecewise: bool = False,
        plain_k0: bool = False,
    ) -> float:
        """ITL of a pure decode step: ``batch_size`` sequences of ``context`` tokens each."""
        verified = None if verified_per_sequence is None else batch_size * verified_per_sequence
        return self.step_seconds(
            batch_size,
            k,
            context_tokens=batch_size * context,
            speculative=speculative,
            verified_tokens=verified,
            piecewise=piecewise,
            plain_k0=plain_k0,
        )
