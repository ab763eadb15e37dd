"""Named deployments to simulate: GPU x TP x target x drafter x acceptance x limits.

Two presets mirror the seed (Cohere, "Hardware-Aware, Dynamic Speculative
Decoding"): ``seed-dense`` (Command A, 111B dense, TP 4 on H100, EAGLE) and
``seed-moe`` (a ~400B-total / ~30B-active fine-grained MoE, TP 8 on H100,
FP8, EAGLE; the seed's MoE shape is not public). They reproduce the seed's
qualitative findings from the physics:

- seed-dense: the best fixed K falls monotonically with batch size, and
  fixed K=3 drops below vanilla at batch 128 and 256 (its step is
  compute-bound: 4x the tokens of a vanilla step cost ~2.5x the time while
  AL(3) is ~2). Its EAGLE acceptance level and GEMM half height are fitted
  jointly to the seed's BS 128 and 256 figures and vLLM's EAGLE AL anchors
  (``calibration.py``; README "What make demo shows" lists what no single
  setting fits).
- seed-moe: the best fixed K is non-monotonic: low at small batch (each
  extra verified token loads ~8 more experts), higher around 16-64 (the batch
  already touches nearly every expert), low again at 256 (compute and
  per-token costs grow).

The others cover the remaining GPUs and methods. Everything is modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from specdeploy.runtime.profile import SIM_ENGINE, Fingerprint
from specdeploy.runtime.sim.acceptance import (
    DRAFT_MODEL_MT_BENCH,
    EAGLE3_MT_BENCH,
    EAGLE_MT_BENCH,
    EAGLE_VLLM_ANCHORED,
    NGRAM_CHAT,
    AcceptanceModel,
)
from specdeploy.runtime.sim.drafts import Drafter, draft_model, eagle3_head, eagle_head, ngram
from specdeploy.runtime.sim.engine import AnyPolicy, EngineConfig, SimResult, simulate
from specdeploy.runtime.sim.hardware import GPU, get_gpu
from specdeploy.runtime.sim.models import (
    COMMAND_A,
    LLAMA_8B,
    LLAMA_70B,
    LLAMA_70B_FP8,
    MIXTRAL_8X7B,
    QWEN3_235B,
    SEED_MOE,
    TransformerModel,
)
from specdeploy.runtime.sim.proposals import ProposalModel, effective_rates
from specdeploy.runtime.sim.roofline import Roofline
from specdeploy.runtime.sim.step_time import Overheads, StepCost
from specdeploy.runtime.sim.workload import (
    SHAREGPT_OUTPUT,
    SHAREGPT_PROMPT,
    ClosedLoop,
    Workload,
)

SIM_ENGINE_VERSION = "0.32.0"
"""The vLLM version whose behaviour the engine model follows."""
SEED_DENSE_GEMM_M_HALF = 192.0
"""seed-dense's GEMM half-efficiency height: the joint fit of ``calibration.py``."""
V1_RUNNER_METHODS = frozenset({"suffix", "medusa", "mlp_speculator", "custom_class"})
"""Methods vLLM 0.32's V2 model runner does not support, so it runs them on V1
(``VllmConfig._get_v2_model_runner_unsupported_features``)."""
MODEL_RUNNERS = ("v1", "v2")


@dataclass(frozen=True)
class Preset:
    """Everything needed to simulate one replica and to fingerprint its profile."""

    name: str
    description: str
    gpu: GPU
    tp: int
    model: TransformerModel
    drafter: Drafter
    acceptance: AcceptanceModel
    max_k: int
    max_batch_size: int
    workload: Workload
    dataset: str = "mt-bench"
    max_batched_tokens: int = 8192
    overheads: Overheads = field(default_factory=Overheads)
    proposals: ProposalModel | None = None
    """The workload's drafting rate for lookup drafters (None: the drafter's default)."""
    gemm_m_half: float = 64.0
    """The roofline's GEMM half-efficiency height (``roofline.Roofline``)."""
    time_scale: float = 1.0
    """Every step this many times as long (``costs.StepCost.time_scale``)."""
    verify_slope: float = 1.0
    """Drafts verified this many times as dear (``step_time.StepCost.verify_slope``)."""
    model_runner: str = ""
    """vLLM's model runner, ``v1`` or ``v2``; empty: vLLM 0.32's own choice (``runner``)."""

    def __post_init__(self) -> None:
        if self.model_runner and self.model_runner not in MODEL_RUNNERS:
            raise ValueError(
                f"model_runner must be one of {list(MODEL_RUNNERS)} or empty, "
                f"got {self.model_runner!r}"
            )

    @property
    def runner(self) -> str:
        """The model runner the pod gets.

        vLLM 0.32 picks V2 whenever Triton is present (every GPU build) and the
        method is supported (``VllmConfig.use_v2_model_runner``). That matters
        for a K table: V1 overrides full CUDA graphs with PIECEWISE once a table
        is set (``_maybe_override_dynamic_sd_cudagraph_mode``), V2 captures full
        graphs for every K the table holds (``v1/worker/gpu/cudagraph_utils.py``),
        so only a V1 pod pays ``Overheads.per_layer_s``.
        """
        if self.model_runner:
            return self.model_runner
        return "v1" if self.drafter.method in V1_RUNNER_METHODS else "v2"

    @cached_property
    def cost(self) -> StepCost:
        """The step cost model (one instance per preset: its memo tables are shared)."""
        roof = Roofline(self.gpu, self.tp, gemm_m_half=self.gemm_m_half)
        overheads = self.overheads
        if self.runner != "v1":  # full graphs with a table: no per-layer launches
            overheads = replace(overheads, per_layer_s=0.0)
        return StepCost(
            self.gpu, self.model, self.drafter, self.tp, roof, overheads, self.time_scale,
            self.verify_slope,
        )  # fmt: skip

    @property
    def proposal_model(self) -> ProposalModel:
        """How often and how long the drafter proposes on this preset's workload."""
        return self.drafter.proposals if self.proposals is None else self.proposals

    def nominal_rates(self, acceptance: AcceptanceModel | None = None) -> tuple[float, ...]:
        """a_i with a missing draft counted as a rejection (what a profile should measure)."""
        given = (self.acceptance if acceptance is None else acceptance).nominal()
        return effective_rates(given, self.proposal_model)

    def engine_config(
        self,
        *,
        speculative: bool = True,
        acceptance: AcceptanceModel | None = None,
        max_batch_size: int | None = None,
        proposals: ProposalModel | None = None,
        piecewise: bool = False,
        plain_k0: bool = False,
    ) -> EngineConfig:
        """An engine for this preset; ``speculative`` False is vanilla serving.

        ``piecewise``: a K table is set (the table and adaptive policies); on
        the V1 runner vLLM then runs piecewise CUDA graphs (``step_time.py``), on
        V2 it costs nothing (``runner``). ``plain_k0``: the add-on's plugin is
        loaded (``step_time`` module docstring).
        """
        batch = self.max_batch_size if max_batch_size is None else max_batch_size
        return EngineConfig(
            cost=self.cost,
            acceptance=self.acceptance if acceptance is None else acceptance,
            max_batch_size=batch,
            max_k=self.max_k,
            max_batched_tokens=max(self.max_batched_tokens, batch * (self.max_k + 1)),
            speculative=speculative,
            proposals=self.proposal_model if proposals is None else proposals,
            piecewise_graphs=piecewise,
            plain_k0=plain_k0,
        )

    def simulate(
        self,
        policy: AnyPolicy | None,
        workload: Workload | None = None,
        *,
        speculative: bool = True,
        acceptance: AcceptanceModel | None = None,
        proposals: ProposalModel | None = None,
        piecewise: bool = False,
        plain_k0: bool = False,
        steps: int | None = None,
        duration_s: float | None = None,
        seed: int = 0,
        warmup_steps: int = 0,
        trace: bool = False,
    ) -> SimResult:
        """Run the engine on ``workload`` (default: the preset's own)."""
        config = self.engine_config(
            speculative=speculative,
            acceptance=acceptance,
            proposals=proposals,
            piecewise=piecewise,
            plain_k0=plain_k0,
        )
        return simulate(
            config,
            self.workload if workload is None else workload,
            policy,
            steps=steps,
            duration_s=duration_s,
            seed=seed,
            warmup_steps=warmup_steps,
            trace=trace,
        )

    def fingerprint(self) -> Fingerprint:
        """What a profile of this preset is keyed by (GPU type as GFD labels it)."""
        return Fingerprint(
            model=self.model.name,
            method=self.drafter.method,
            draft_model=self.drafter.name,
            gpu_type=self.gpu.product,
            gpus_per_replica=self.tp,
            dtype=self.model.dtype,
            engine=SIM_ENGINE,
            engine_version=SIM_ENGINE_VERSION,
            max_k=self.max_k,
        )

    @property
    def mean_context(self) -> float:
        """Mean KV context of a decoding request: prompt plus half the answer."""
        return self.workload.prompt.mean + self.workload.output.mean / 2.0


def _presets() -> dict[str, Preset]:
    h100, h200 = get_gpu("H100-SXM"), get_gpu("H200")
    a100, l40s = get_gpu("A100-80GB"), get_gpu("L40S")
    b200, mi300x = get_gpu("B200"), get_gpu("MI300X")
    eagle3_8b = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    eagle3_70b = "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    presets = (
        Preset(
            name="seed-dense",
            description="Command A (111B dense) on 4x H100 with EAGLE: the seed's dense case",
            gpu=h100,
            tp=4,
            model=COMMAND_A,
            drafter=eagle_head(COMMAND_A, "sim/eagle-command-a"),
            acceptance=EAGLE_VLLM_ANCHORED,
            max_k=5,
            max_batch_size=256,
            workload=ClosedLoop(256),
            gemm_m_half=SEED_DENSE_GEMM_M_HALF,
        ),
        Preset(
            name="seed-moe",
            description="~400B-total/~30B-active MoE (160 experts, top-8, FP8) on 8x H100, EAGLE",
            gpu=h100,
            tp=8,
            model=SEED_MOE,
            drafter=eagle_head(SEED_MOE, "sim/eagle-moe-400b-a30b"),
            acceptance=EAGLE_MT_BENCH,
            max_k=5,
            max_batch_size=256,
            workload=ClosedLoop(256),
        ),
        Preset(
            name="llama8b-eagle3-h200",
            description="Llama-3.1-8B on one H200 with EAGLE-3 (AL ~3.5 at K=7 on MT-Bench)",
            gpu=h200,
            tp=1,
            model=LLAMA_8B,
            drafter=eagle3_head(LLAMA_8B, eagle3_8b),
            acceptance=EAGLE3_MT_BENCH,
            max_k=7,
            max_batch_size=256,
            workload=ClosedLoop(128),
        ),
        Preset(
            name="llama8b-eagle3-l40s",
            description="Llama-3.1-8B on one L40S (PCIe, 0.86 TB/s) with EAGLE-3",
            gpu=l40s,
            tp=1,
            model=LLAMA_8B,
            drafter=eagle3_head(LLAMA_8B, eagle3_8b),
            acceptance=EAGLE3_MT_BENCH,
            max_k=5,
            max_batch_size=128,
            workload=ClosedLoop(64),
        ),
        Preset(
            name="mixtral-eagle-h200",
            description="Mixtral-8x7B (8 experts, top-2) on 2x H200 with EAGLE",
            gpu=h200,
            tp=2,
            model=MIXTRAL_8X7B,
            drafter=eagle_head(MIXTRAL_8X7B, "sim/eagle-mixtral-8x7b"),
            acceptance=EAGLE_MT_BENCH,
            max_k=5,
            max_batch_size=256,
            workload=ClosedLoop(128),
        ),
        Preset(
            name="qwen3-moe-eagle3-h200",
            description="Qwen3-235B-A22B (128 experts, top-8) on 4x H200 with EAGLE-3",
            gpu=h200,
            tp=4,
            model=QWEN3_235B,
            drafter=eagle3_head(QWEN3_235B, "sim/eagle3-qwen3-235b-a22b"),
            acceptance=EAGLE3_MT_BENCH,
            max_k=7,
            max_batch_size=256,
            workload=ClosedLoop(128),
        ),
        Preset(
            name="llama70b-draft-a100",
            description="Llama-3.1-70B on 4x A100 80GB with Llama-3.2-1B as draft model",
            gpu=a100,
            tp=4,
            model=LLAMA_70B,
            drafter=draft_model(),
            acceptance=DRAFT_MODEL_MT_BENCH,
            max_k=5,
            max_batch_size=256,
            workload=ClosedLoop(128),
        ),
        Preset(
            name="llama8b-ngram-a100",
            description="Llama-3.1-8B on one A100 80GB with n-gram lookup (low, bursty acceptance)",
            gpu=a100,
            tp=1,
            model=LLAMA_8B,
            drafter=ngram(),
            acceptance=NGRAM_CHAT,
            max_k=5,
            max_batch_size=256,
            workload=ClosedLoop(64, SHAREGPT_PROMPT, SHAREGPT_OUTPUT),
            dataset="sharegpt",
        ),
        Preset(
            name="llama70b-eagle3-b200",
            description="Llama-3.1-70B (FP8) on one B200 with EAGLE-3",
            gpu=b200,
            tp=1,
            model=LLAMA_70B_FP8,
            drafter=eagle3_head(LLAMA_70B, eagle3_70b),
            acceptance=EAGLE3_MT_BENCH,
            max_k=7,
            max_batch_size=256,
            workload=ClosedLoop(128),
        ),
        Preset(
            name="llama70b-eagle3-mi300x",
            description="Llama-3.1-70B on one MI300X with EAGLE-3 (batch capped by the KV cache)",
            gpu=mi300x,
            tp=1,
            model=LLAMA_70B,
            drafter=eagle3_head(LLAMA_70B, eagle3_70b),
            acceptance=EAGLE3_MT_BENCH,
            max_k=7,
            max_batch_size=128,
            workload=ClosedLoop(128),
        ),
    )
    return {p.name: p for p in presets}


PRESETS: dict[str, Preset] = _presets()


def list_presets() -> list[str]:
    """Names of all presets, sorted."""
    return sorted(PRESETS)


def get_preset(name: str) -> Preset:
    """A preset by name; the error lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(list_presets())}") from None
