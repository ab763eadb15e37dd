"""Roofline time of one forward pass of a (target or draft) model on one TP group.

A forward pass is a sequence of kernel classes that do not overlap with each
other, each bounded by memory or compute:

- GEMMs: read the weights once (per GPU: bytes / TP) and do 2 FLOPs per
  weight per token. Memory and compute overlap inside a kernel, so the two
  times are combined with a smooth maximum (an exact max is too optimistic
  near the ridge point, a sum too pessimistic). Small-M GEMMs waste tensor
  core tiles and waves, so compute efficiency ramps with the GEMM height M:
  eff(M) = eff_max * M / (M + m_half). Routed experts are separate GEMMs
  whose height is the tokens each loaded expert received.
- Attention: reads every sequence's KV cache once; FLOPs grow with
  (query tokens x context tokens).
- Elementwise kernels (norms, residual adds, activations): streaming traffic
  proportional to the tokens.
- Tensor parallel: two all-reduces of the hidden state per layer, each paying
  a latency plus a ring transfer; the logits are gathered to one rank and the
  sampler makes a few passes over them.

The constants are modelled, chosen so that figures land where public
measurements do; every one is documented where it is defined.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdeploy.runtime.sim.hardware import GPU
from specdeploy.runtime.sim.models import TransformerModel


@dataclass(frozen=True)
class ForwardCost:
    """Seconds of one forward pass by kernel class (all per GPU, summed)."""

    gemm: float
    attention: float
    elementwise: float
    allreduce: float
    logits: float

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.elementwise + self.allreduce + self.logits


@dataclass(frozen=True)
class _Rates:
    """Per-model constants of one roofline: seconds per byte, FLOP, token, pair."""

    always_memory: float  # s to read the always-on weights
    always_compute: float  # s per token at full efficiency
    expert_memory: float  # s to read one routed expert in every MoE layer
    routed_compute: float  # s per token (top-k experts) at full efficiency
    elementwise: float  # s per token
    allreduce_fixed: float  # s per forward (latencies)
    allreduce_per_token: float  # s per token (ring transfers)
    logits_per_token: float  # s per sampled token (gather + sampler passes)
    kv_per_token: float  # s per context token read
    attention_per_pair: float  # s per (query, key) pair


@dataclass(frozen=True)
class Roofline:
    """Kernel-class roofline for one tensor-parallel group of ``tp`` GPUs."""

    gpu: GPU
    tp: int = 1
    gemm_m_half: float = 64.0
    """GEMM height (tokens) at which a GEMM reaches half its peak efficiency.
    Decode GEMMs are short and wide; their tiles (64-128 rows) and waves run
    part-empty until M reaches a few hundred rows."""
    overlap_p: float = 4.0
    """Exponent of the smooth max of memory and compute time inside a kernel."""
    attention_efficiency: float = 0.5
    """Fraction of the GEMM compute ceiling attention kernels reach."""
    sampler_passes: float = 4.0
    """fp32 passes over the logits the sampler makes (softmax, rejection, ...)."""
    _rates: dict[int, tuple[TransformerModel, _Rates]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _static: dict[tuple[int, float, float, float | None], float] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.tp < 1 or self.gemm_m_half < 0 or self.overlap_p < 1:
            raise ValueError(f"invalid roofline parameters: {self}")

    def smooth_max(self, a: float, b: float) -> float:
        """(a^p + b^p)^(1/p): max(a, b) with a soft corner at the ridge point."""
        if a <= 0.0 or b <= 0.0:
            return max(a, b)
        p = self.overlap_p
        hi = a if a > b else b
        return float(hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p))

    def gemm_efficiency(self, m: float) -> float:
        """Fraction of datasheet compute a GEMM of height ``m`` sustains."""
        return self.gpu.compute_efficiency * m / (m + self.gemm_m_half)

    def allreduce_seconds(self, nbytes: float) -> float:
        """One ring all-reduce of ``nbytes`` across the TP group (0 without TP)."""
        if self.tp <= 1:
            return 0.0
        ring = 2.0 * (self.tp - 1) / self.tp * nbytes / self.gpu.link_bandwidth
        return self.gpu.link_latency_us * 1e-6 + ring

    def forward(
        self,
        model: TransformerModel,
        tokens: float,
        context_tokens: float,
        attention_pairs: float,
        logit_tokens: float | None = None,
        sequences: float | None = None,
    ) -> ForwardCost:
        """Cost of one forward over ``tokens`` tokens, by kernel class.

        ``context_tokens``: KV-cache tokens read (sum of the sequences' context
        lengths). ``attention_pairs``: sum over query tokens of the context
        each attends to. ``logit_tokens``: tokens whose logits are sampled
        (default: all of them, as in verification). ``sequences``: how many
        sequences the tokens belong to (an MoE's routing overlap acts within
        a sequence; None routes every token independently).
        """
        if tokens <= 0:
            return ForwardCost(0.0, 0.0, 0.0, 0.0, 0.0)
        r = self.rates(model)
        sampled = tokens if logit_tokens is None else logit_tokens
        return ForwardCost(
            gemm=self._gemms(model, r, tokens, sequences),
            attention=self.smooth_max(
                context_tokens * r.kv_per_token, attention_pairs * r.attention_per_pair
            ),
            elementwise=tokens * r.elementwise,
            allreduce=r.allreduce_fixed + tokens * r.allreduce_per_token,
            logits=sampled * r.logits_per_token,
        )

    def forward_seconds(
        self,
        model: TransformerModel,
        tokens: float,
        context_tokens: float,
        attention_pairs: float,
        logit_tokens: float,
        sequences: float | None = None,
    ) -> float:
        """``forward(...).total``, fast: the token-count-only part is memoised.

        The engine prices thousands of steps whose token counts repeat while
        their context lengths do not, so only attention is recomputed.
        """
        if tokens <= 0:
            return 0.0
        r = self.rates(model)
        key = (id(model), tokens, logit_tokens, sequences if model.is_moe else None)
        static = self._static.get(key)
        if static is None:
            if len(self._static) > 200_000:
                self._static.clear()
            static = (
                self._gemms(model, r, tokens, sequences)
                + tokens * (r.elementwise + r.allreduce_per_token)
                + r.allreduce_fixed
                + logit_tokens * r.logits_per_token
            )
            self._static[key] = static
        return static + self.smooth_max(
            context_tokens * r.kv_per_token, attention_pairs * r.attention_per_pair
        )

    def attention_seconds(self, model: TransformerModel, context: float, pairs: float) -> float:
        """Attention kernels: every sequence's KV read once, FLOPs per (query, key) pair."""
        r = self.rates(model)
        return self.smooth_max(context * r.kv_per_token, pairs * r.attention_per_pair)

    def rates(self, model: TransformerModel) -> _Rates:
        """The model's constants on this roofline (computed once per model)."""
        hit = self._rates.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
        rates = self._compute_rates(model)
        self._rates[id(model)] = (model, rates)  # holding the model pins its id
        return rates

    def _compute_rates(self, model: TransformerModel) -> _Rates:
        tp, bw = self.tp, self.gpu.bandwidth
        ceiling = self.gpu.flops(model.dtype)
        wb = model.weight_bytes
        routed_params = model.top_k * model.moe_layers * model.expert_params
        ring = 0.0
        if tp > 1:
            ring = 2.0 * (tp - 1) / tp * model.hidden * 2.0 / self.gpu.link_bandwidth
        allreduces = 2 * model.layers if tp > 1 else 0
        gather = (tp - 1) / tp * model.vocab * 2.0 / self.gpu.link_bandwidth if tp > 1 else 0.0
        # KV heads are split across TP ranks (replicated once TP exceeds them).
        kv_shards = min(tp, model.kv_heads)
        attention_ceiling = self.gpu.flops("bfloat16") * self.attention_efficiency
        return _Rates(
            always_memory=model.always_read_params * wb / tp / bw,
            always_compute=2.0 * model.always_read_params / tp / ceiling,
            expert_memory=model.moe_layers * model.expert_params * wb / tp / bw,
            routed_compute=2.0 * routed_params / tp / ceiling,
            elementwise=model.activation_bytes_per_token(tp) / bw,
            allreduce_fixed=allreduces * self.gpu.link_latency_us * 1e-6,
            allreduce_per_token=allreduces * ring,
            logits_per_token=gather + model.vocab * 4.0 * self.sampler_passes / bw,
            kv_per_token=model.kv_bytes_per_token / kv_shards / bw,
            attention_per_pair=model.attention_flops_per_pair() / tp / attention_ceiling,
        )

    def dense_gemm_bounds(self, model: TransformerModel, tokens: float) -> tuple[float, float]:
        """(memory seconds, compute seconds) of the always-on weight GEMMs at ``tokens``.

        Which one is larger says whether the step is memory- or compute-bound.
        """
        r = self.rates(model)
        return r.always_memory, r.always_compute * (tokens + self.gemm_m_half)

    def _gemms(
        self, model: TransformerModel, r: _Rates, tokens: float, sequences: float | None = None
    ) -> float:
        """Weight GEMMs: always-on weights at height T, routed experts at T*k/loaded."""
        m_half = self.gemm_m_half
        # compute / efficiency(M) with M = T: T * c * (T + m_half) / T
        dense = self.smooth_max(r.always_memory, r.always_compute * (tokens + m_half))
        if not model.is_moe:
            return dense
        loaded = model.distinct_experts(tokens, sequences)
        per_expert = tokens * model.top_k / loaded
        routed_compute = r.routed_compute * tokens * (per_expert + m_half) / per_expert
        return dense + self.smooth_max(loaded * r.expert_memory, routed_compute)
