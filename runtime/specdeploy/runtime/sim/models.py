"""Target (and draft) transformer shapes: parameters, bytes read per step, KV size.

A decoder is described by its config numbers (layers, hidden size, heads,
MLP width, vocabulary, experts). From them the cost model needs three things
per step: how many weight bytes are read, how many FLOPs are done, and how
many KV-cache bytes each token of context costs.

Dense models read every weight once per step whatever the token count. MoE
models read the always-on part (attention, shared experts, dense layers, LM
head) plus every *distinct* routed expert the step's tokens are sent to: with
top-k routing over E experts, T tokens touch on average E*(1-(1-k/E)^T)
experts per layer (each token picks k of E; an expert stays untouched with
probability (1-k/E)^T, treating picks as independent). That count grows with
the tokens verified, which is why verifying K extra drafts is expensive for an
MoE at small batch and almost free once the batch already touches every
expert.

Independence overstates the growth: the tokens of one sequence are about the
same thing and reuse each other's experts (Cohere's MoE post reports ~38%
overlap). ``routing_overlap`` rho is that share: each token beyond a
sequence's first routes like (1 - rho) of an independent token, so T tokens
of S sequences load the experts of S + (T - S)(1 - rho) independent ones.
With rho = 0 the gap between the best K and the runner-up is a few percent;
overlap flattens the MoE's non-monotonic shape further. All figures are
modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


def independent_tokens(tokens: float, sequences: float | None, overlap: float) -> float:
    """Tokens that route like independent ones: S + (T - S)(1 - rho) (module docstring)."""
    if sequences is None or overlap <= 0.0:
        return tokens
    first = min(tokens, max(sequences, 0.0))
    return first + (tokens - first) * (1.0 - overlap)


def expected_distinct_experts(experts: int, top_k: int, tokens: float) -> float:
    """E*(1-(1-k/E)^T): experts one MoE layer loads for T routed tokens."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    untouched = (1.0 - top_k / experts) ** tokens
    return float(experts * (1.0 - untouched))


@dataclass(frozen=True)
class TransformerModel:
    """Shape of a decoder-only transformer (dense when ``experts`` is 0)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    weight_bytes: float = 2.0
    """Bytes per weight: 2 for bf16, 1 for fp8 checkpoints."""
    kv_bytes: float = 2.0
    experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    moe_layers: int = 0
    """Layers with routed experts; the other layers have a dense MLP."""
    extra_params: float = 0.0
    """Weights outside the layer stack read every step (EAGLE's fusion fc)."""
    routing_overlap: float = 0.0
    """Share of a sequence's extra tokens routed to experts its first token already
    loaded (module docstring); 0 is independent routing."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.routing_overlap < 1.0:
            raise ValueError(f"routing_overlap must be in [0, 1), got {self.routing_overlap}")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def dtype(self) -> str:
        """Compute dtype as the fingerprint spells it."""
        return "fp8" if self.weight_bytes < 2 else "bfloat16"

    @property
    def attention_params(self) -> float:
        """Q, K, V and O projections of one layer."""
        q_and_o = 2 * self.hidden * self.heads * self.head_dim
        k_and_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return float(q_and_o + k_and_v)

    @property
    def expert_params(self) -> float:
        """One routed expert of one layer (gated MLP: gate, up, down)."""
        return float(3 * self.hidden * self.moe_intermediate)

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers if self.is_moe else self.layers

    @property
    def lm_head_params(self) -> float:
        return float(self.vocab * self.hidden)

    @property
    def always_read_params(self) -> float:
        """Weights every step reads whatever the routing: all but routed experts."""
        dense_mlp = self.dense_layers * 3 * self.hidden * self.intermediate
        shared = self.moe_layers * self.shared_experts * self.expert_params
        stack = self.layers * self.attention_params + dense_mlp + shared
        return stack + self.lm_head_params + self.extra_params

    @property
    def params_total(self) -> float:
        """All weights (embedding counted once more than the LM head)."""
        routed = self.moe_layers * self.experts * self.expert_params
        return self.always_read_params + routed + self.vocab * self.hidden

    @property
    def params_active(self) -> float:
        """Weights one token multiplies through (drives FLOPs per token)."""
        routed = self.moe_layers * self.top_k * self.expert_params
        return self.always_read_params + routed

    def distinct_experts(self, tokens: float, sequences: float | None = None) -> float:
        """Routed experts one MoE layer loads for ``tokens`` tokens of ``sequences`` sequences.

        Without ``sequences`` every token routes independently.
        """
        routed = independent_tokens(tokens, sequences, self.routing_overlap)
        return expected_distinct_experts(self.experts, self.top_k, routed)

    def weight_bytes_read(self, tokens: float, sequences: float | None = None) -> float:
        """Weight bytes one forward over ``tokens`` tokens reads (whole model)."""
        loaded = self.distinct_experts(tokens, sequences)
        routed = self.moe_layers * loaded * self.expert_params
        return (self.always_read_params + routed) * self.weight_bytes

    def tokens_per_expert(self, tokens: float, sequences: float | None = None) -> float:
        """Mean GEMM height of a routed expert: routed tokens / experts loaded."""
        loaded = self.distinct_experts(tokens, sequences)
        return tokens * self.top_k / loaded if loaded > 0 else 0.0

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token of context occupies (all layers, all GPUs)."""
        return float(2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes)

    def attention_flops_per_pair(self) -> float:
        """FLOPs of one (query token, context token) pair: QK^T and PV, all layers."""
        return float(4 * self.layers * self.heads * self.head_dim)

    def activation_bytes_per_token(self, tp: int) -> float:
        """Elementwise traffic per token per GPU (norms, residual adds, activations).

        Hidden-sized tensors are replicated across tensor-parallel ranks, MLP
        intermediates are split; about six hidden-sized reads/writes and three
        intermediate-sized ones per layer survive kernel fusion.
        """
        width = self.intermediate if not self.is_moe else self.moe_intermediate * self.top_k
        per_layer = 6 * self.hidden + 3 * width / tp
        return float(self.layers * per_layer * 2)


# Shapes follow the models' published configs; the seed MoE is synthetic.
COMMAND_A = TransformerModel(
    name="CohereLabs/c4ai-command-a-03-2025",
    layers=64,
    hidden=12288,
    heads=96,
    kv_heads=8,
    head_dim=128,
    intermediate=33792,
    vocab=256000,
)
LLAMA_8B = TransformerModel(
    name="meta-llama/Llama-3.1-8B-Instruct",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    vocab=128256,
)
LLAMA_70B = TransformerModel(
    name="meta-llama/Llama-3.1-70B-Instruct",
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    head_dim=128,
    intermediate=28672,
    vocab=128256,
)
LLAMA_70B_FP8 = replace(LLAMA_70B, name="nvidia/Llama-3.1-70B-Instruct-FP8", weight_bytes=1.0)
LLAMA_1B = TransformerModel(
    name="meta-llama/Llama-3.2-1B-Instruct",
    layers=16,
    hidden=2048,
    heads=32,
    kv_heads=8,
    head_dim=64,
    intermediate=8192,
    vocab=128256,
)
MIXTRAL_8X7B = TransformerModel(
    name="mistralai/Mixtral-8x7B-Instruct-v0.1",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    vocab=32000,
    experts=8,
    top_k=2,
    moe_intermediate=14336,
    moe_layers=32,
)
QWEN3_235B = TransformerModel(
    name="Qwen/Qwen3-235B-A22B-Instruct-2507",
    layers=94,
    hidden=4096,
    heads=64,
    kv_heads=4,
    head_dim=128,
    intermediate=12288,
    vocab=151936,
    experts=128,
    top_k=8,
    moe_intermediate=1536,
    moe_layers=94,
)
# A ~400B-total / ~30B-active fine-grained MoE in FP8 standing in for the
# seed's MoE (its exact shape is not public): many small experts, top-8.
SEED_MOE = TransformerModel(
    name="sim/moe-400b-a30b",
    layers=64,
    hidden=6144,
    heads=64,
    kv_heads=8,
    head_dim=128,
    intermediate=24576,
    vocab=256000,
    weight_bytes=1.0,
    experts=160,
    top_k=8,
    moe_intermediate=2048,
    shared_experts=1,
    moe_layers=64,
)

MODELS: dict[str, TransformerModel] = {
    m.name: m
    for m in (COMMAND_A, LLAMA_8B, LLAMA_70B, LLAMA_1B, MIXTRAL_8X7B, QWEN3_235B, SEED_MOE)
}
