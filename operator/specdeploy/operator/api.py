"""The operator's API: SpeculativeDeployment (spec and status) as pydantic models.

These models are the single source of truth for the resource: the CRD in
``crds/`` is generated from them (``specdeploy operator crds``), and
``tests/unit/test_crds_fresh.py`` fails when the two disagree. Admission
checks what a schema can (types, ranges, enums, CEL rules for cross-field
constraints); ``decision/validation.py`` re-checks everything, because an object may
predate the current CRD, and adds what CEL cannot express.

SpeculationProfile is the runtime's own model (``specdeploy.runtime.profile``):
the profiler writes it, the runtime reads it, and the operator only stores it,
so its rules live there once; so do the API group and version, the
SpeculativeDeployment's kind and plural (the runtime's one kind table,
``specdeploy.runtime.kube.paths``, names both resources), and the ``Policy``
names the pods read (``specdeploy.runtime.contract``).

camelCase on the wire, snake_case in Python. Layer: no I/O, no imports from
the rest of the operator.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, JsonValue

from specdeploy.runtime.contract import Policy
from specdeploy.runtime.profile import (
    API_VERSION,
    DEPLOYMENT_KIND,
    DEPLOYMENT_PLURAL,
    GROUP,
    PROFILE_KIND,
    PROFILE_PLURAL,
    VERSION,
    WireModel,
)

__all__ = [
    "API_VERSION",
    "DEPLOYMENT_KIND",
    "DEPLOYMENT_PLURAL",
    "GROUP",
    "PROFILE_KIND",
    "PROFILE_PLURAL",
    "VERSION",
    "Policy",
]

# Methods whose drafts come from a separate set of weights named by draftModel.
# mtp is not here: vLLM drafts with the target model's own MTP layers.
METHODS_NEEDING_DRAFT = ("eagle", "eagle3", "draft_model")
# Methods that draft from the context (n-grams, suffix trees): a draft model is a mistake.
METHODS_WITHOUT_DRAFT = ("ngram", "suffix")
# The label GPU Feature Discovery writes with the GPU product name.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_BATCH_SIZE = 4096
"""A bound on input: vLLM's max_num_seqs goes no higher in any deployment we know of."""
MAX_POOLS = 16
DEFAULT_GRACE_SECONDS = 60
SHUTDOWN_MARGIN_SECONDS = 5
"""Seconds of the grace left after vLLM's ``--shutdown-timeout`` for the process to exit."""
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


def _cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry; the message names the field.

    A rule on an object whose CRD default is ``{}`` must guard defaulted
    fields with ``has()``: the API server checks the default value itself
    against the rule before any nested default is filled in.
    """
    entry = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def _rules(*rules: dict[str, str]) -> ConfigDict:
    validations: list[JsonValue] = [dict(r) for r in rules]
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": validations})


# --- spec ----------------------------------------------------------------


class Method(StrEnum):
    """vLLM's speculative method (``speculative_config.method``)."""

    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    DRAFT_MODEL = "draft_model"
    NGRAM = "ngram"
    MTP = "mtp"
    SUFFIX = "suffix"


class Fallback(StrEnum):
    """What a pool runs when speculation loses to plain decoding: ``vanilla`` (no
    speculation configured, the floor) or ``none`` (speculate anyway).

    With ``vanilla`` two floors apply: the profile's (its best K predicted slower at
    every batch size profiled: no speculation from the start) and the live one
    (policies ``adaptive`` and ``table``: R, the live throughput over plain
    decoding's at the served mix, confidently below 1 for several windows: the
    pool rolls to plain decoding with surge, one surged canary replica speculating;
    the canary's wins, or a timed probe where it cannot be scheduled, bring it back;
    where R cannot tell the two apart, one surged plain reference replica serves beside
    the speculating pool and the pods' own time per output token decides;
    ``status.pools[].floor`` says which state and why)."""

    VANILLA = "vanilla"
    NONE = "none"


class ProfilingMode(StrEnum):
    """auto: reuse a profile with the same fingerprint, else profile; always:
    profile again for every spec generation; never: only reuse."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class ProfilerBackend(StrEnum):
    """vllm: a real engine on the pool's GPUs; sim: the simulator (modelled figures)."""

    VLLM = "vllm"
    SIM = "sim"


DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Secret's name (RFC 1123 subdomain): the API server refuses a pod naming another."""
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
"""A Secret's or ConfigMap's key, as the API server checks it in a pod's secretKeyRef."""


class SecretKeyRef(WireModel):
    """A key of a Secret in the deployment's namespace.

    Both are checked as the API server checks a pod's ``secretKeyRef`` (found by
    the fuzzer: ``HF_Token`` passed admission and validation, then every pod
    template naming it was refused)."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    key: str = Field(default="token", min_length=1, max_length=253, pattern=CONFIG_KEY_PATTERN)


class ModelSpec(WireModel):
    """The target model vLLM serves."""

    name: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[^-\s]\S*$",
        description="Hugging Face id or a path in the image (no leading '-': it is vLLM's "
        "first positional argument, and would be read as a flag).",
    )
    revision: str = Field(default="main", min_length=1, max_length=256, pattern=r"^[^-\s]\S*$")
    served_model_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^[^-\s]\S*$",
        description="The name clients ask for; vLLM's default: name.",
    )
    dtype: str = Field(default="bfloat16", pattern=r"^(auto|bfloat16|float16|float32)$")
    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Hugging Face token, passed to vLLM and the profiler as HF_TOKEN."
    )


class SpeculationSpec(WireModel):
    """Speculative decoding: the method, the K buffer size and how K is chosen."""

    model_config = _rules(
        _cel(
            "!has(self.fixedK) || self.fixedK <= self.maxK",
            "spec.speculation.fixedK must be <= spec.speculation.maxK",
            ".fixedK",
        ),
        _cel(
            "self.policy != 'fixed' || has(self.fixedK)",
            "spec.speculation.fixedK is required when spec.speculation.policy is fixed",
            ".fixedK",
        ),
        _cel(
            "!(self.method in ['eagle', 'eagle3', 'draft_model']) || has(self.draftModel)",
            "spec.speculation.draftModel is required for methods eagle, eagle3 and draft_model",
            ".draftModel",
        ),
        _cel(
            "!(self.method in ['ngram', 'suffix']) || !has(self.draftModel)",
            "spec.speculation.draftModel must not be set for methods ngram and suffix",
            ".draftModel",
        ),
    )

    method: Method
    draft_model: str | None = Field(default=None, min_length=1)
    draft_revision: str | None = Field(default=None, min_length=1)
    max_k: int = Field(
        ge=1, le=16, description="vLLM num_speculative_tokens: the K buffer size, fixed per pod."
    )
    policy: Policy = Policy.ADAPTIVE
    fixed_k: int | None = Field(default=None, ge=0, le=16, description="Used by policy fixed.")
    fallback: Fallback = Field(
        default=Fallback.VANILLA,
        description=(
            "vanilla: a pool whose profile predicts speculation slower than plain decoding "
            "at every batch size it profiles, or whose live throughput stays confidently "
            "below plain decoding's at the batch sizes it serves, runs without speculation "
            "(the live case with one canary replica speculating until its evidence wins; "
            "where the evidence cannot tell, one plain reference replica serves beside the "
            "speculating pool to measure plain decoding side by side); none: speculate anyway."
        ),
    )


class Replicas(WireModel):
    """Replica bounds of one pool; the operator runs ``min`` until autoscaling sizes it."""

    model_config = _rules(
        _cel(
            "!has(self.max) || !has(self.min) || self.min <= self.max",
            "replicas.min must be <= replicas.max",
            ".min",
        ),
    )

    min: int = Field(default=1, ge=0, le=1000)
    max: int | None = Field(default=None, ge=0, le=1000, description="Default: min.")


class PoolDefaults(WireModel):
    """Shape of the pools that discovery creates when spec.pools is omitted."""

    gpus_per_replica: int = Field(default=1, ge=1, le=64)
    replicas: Replicas = Replicas()


class PoolSpec(PoolDefaults):
    """vLLM replicas on one GPU type."""

    gpu_type: str = Field(
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="Value of the node label nvidia.com/gpu.product.",
    )


class ProfilingSpec(WireModel):
    """How the K table of each pool is obtained."""

    model_config = _rules(
        _cel(
            "!has(self.backend) || self.backend != 'sim' || has(self.simPreset)",
            "spec.profiling.simPreset is required when spec.profiling.backend is sim",
            ".simPreset",
        ),
    )

    mode: ProfilingMode = ProfilingMode.AUTO
    backend: ProfilerBackend = ProfilerBackend.VLLM
    sim_preset: str | None = Field(
        default=None,
        min_length=1,
        description="backend sim: the preset modelled (specdeploy simulate --list-presets).",
    )
    batch_sizes: tuple[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)], ...] = Field(
        default=DEFAULT_BATCH_SIZES, min_length=1, max_length=64, description="Ascending."
    )
    dataset: str = Field(default="mt-bench", min_length=1)
    image: str | None = Field(
        default=None, min_length=1, description="Image with specdeploy; default: the operator's."
    )
    pod_annotations: dict[str, str] | None = Field(
        default=None,
        description="Added to profiling pods (e.g. sidecar.istio.io/inject: 'false').",
    )
    active_deadline_seconds: int = Field(default=7200, ge=60, le=7 * 24 * 3600)
    backoff_limit: int = Field(
        default=2, ge=0, le=10, description="Retries for transient failures only."
    )


class TelemetrySpec(WireModel):
    """Where the runtime's metrics are read (used by the telemetry loop)."""

    prometheus_url: str | None = Field(default=None, pattern=r"^https?://.+", alias="prometheusURL")
    interval: str = Field(default="60s", pattern=r"^[1-9][0-9]*(s|m|h)$")


QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
"""A plain, non-negative Kubernetes quantity (``500m``, ``4``, ``16Gi``): what a pod's
requests and limits take. Exponent forms (``1e3``) are left out on purpose."""


class ResourceAmounts(WireModel):
    """CPU and memory of the vLLM container (the operator adds the GPUs itself)."""

    cpu: str | None = Field(default=None, max_length=32, pattern=QUANTITY_PATTERN)
    memory: str | None = Field(default=None, max_length=32, pattern=QUANTITY_PATTERN)


class ContainerResources(WireModel):
    """Requests and limits of the serving and profiling containers (review M8).

    Unset: requests of 4 CPUs and 16Gi per GPU of the replica and a memory
    limit of 64Gi per GPU; no CPU limit, because CFS throttling of vLLM's
    scheduler thread shows up as TPOT spikes. Set: used as given, per
    replica, and a request above its limit is refused by validation (the
    API server would refuse the pods, not the Deployment).
    """

    requests: ResourceAmounts | None = None
    limits: ResourceAmounts | None = None


class VllmSpec(WireModel):
    """The serving container, and how it drains on shutdown."""

    model_config = _rules(
        _cel(
            "!has(self.terminationGracePeriodSeconds) || !has(self.preStopSeconds)"
            " || self.terminationGracePeriodSeconds >= self.preStopSeconds + 10",
            "spec.vllm.terminationGracePeriodSeconds must be at least"
            " spec.vllm.preStopSeconds + 10 (vLLM needs time to finish requests)",
            ".terminationGracePeriodSeconds",
        ),
    )

    image: str = Field(
        default="ghcr.io/specdeploy/specdeploy-runtime:0.1.0",
        min_length=1,
        description="Serving image: vLLM plus the specdeploy add-on (images/runtime.Dockerfile); "
        "a plain vLLM image cannot load --scheduler-cls.",
    )
    engine_version: str = Field(
        default="0.32.0",
        min_length=1,
        description="vLLM version in the image; part of the profile fingerprint.",
    )
    extra_args: tuple[Annotated[str, Field(min_length=1, max_length=4096)], ...] = Field(
        default=(), max_length=64
    )
    pod_annotations: dict[str, str] | None = Field(
        default=None, description="Added to the serving pods."
    )
    pre_stop_seconds: int = Field(default=15, ge=0, le=600)
    termination_grace_period_seconds: int | None = Field(
        default=None,
        ge=10,
        le=3600,
        description="Default: 60, or with autoscaling the preStop pause plus the longest "
        "expected request (autoscaling.maxOutputTokens at tpotTargetMs) plus 5s, so a "
        "scale-down lets every request in flight finish.",
    )

    def grace_seconds(self, longest_request_s: float | None = None) -> int:
        """The pods' termination grace: the spec's, else derived (see the field)."""
        if self.termination_grace_period_seconds is not None:
            return self.termination_grace_period_seconds
        if longest_request_s is None:
            return DEFAULT_GRACE_SECONDS
        derived = self.pre_stop_seconds + math.ceil(longest_request_s) + SHUTDOWN_MARGIN_SECONDS
        return min(max(DEFAULT_GRACE_SECONDS, derived), 3600)

    resources: ContainerResources | None = Field(
        default=None,
        description="CPU and memory of the vLLM container (serving and profiling); "
        "default per GPU: requests 4 CPUs and 16Gi, limit 64Gi memory.",
    )


class AutoscalingMode(StrEnum):
    """Who sets a pool's replica count (``operator/README.md``, "Autoscaling")."""

    NONE = "none"
    """Nobody: every pool runs ``replicas.min``."""
    OPERATOR = "operator"
    """The operator writes the pool Deployment's ``replicas`` from the capacity model."""
    HPA = "hpa"
    """An ``autoscaling/v2`` HPA per pool on the operator's gauge
    ``specdeploy_operator_pool_wanted_replicas`` (served by prometheus-adapter); the operator
    leaves ``replicas`` to it."""
    KEDA = "keda"
    """A KEDA ScaledObject per pool with a Prometheus trigger on the same metric."""


class AutoscalingSpec(WireModel):
    """Replica sizing from the capacity the tables predict.

    Every mode computes the same number: the pool's demand (generation
    tokens/s plus its queue drained within ``queueDrainSeconds``) over one
    replica's capacity (the tokens/s it serves at the largest batch that
    keeps ``tpotTargetMs``, under its K table and the live acceptance), less
    ``headroom``. The modes differ in who applies it, with the windows below.
    """

    model_config = _rules(
        _cel(
            "!has(self.mode) || self.mode == 'none' || has(self.tpotTargetMs)",
            "autoscaling.tpotTargetMs is required unless mode is none",
            ".tpotTargetMs",
        ),
    )

    mode: AutoscalingMode = AutoscalingMode.NONE
    tpot_target_ms: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="The per-output-token latency each sequence must keep (the SLO); a replica's "
        "capacity is its tokens/s at the largest batch that meets it.",
    )
    headroom: float = Field(
        default=0.2,
        ge=0,
        le=0.9,
        description="Share of each replica's capacity kept free for bursts (0.2: plan at 80%).",
    )
    queue_drain_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Waiting requests count as demand that must be served within this time.",
    )
    max_output_tokens: int = Field(
        default=2048,
        ge=1,
        le=1_000_000,
        description="The longest output a request may ask for: at tpotTargetMs it is the "
        "longest request, which a scale-down waits for (the pods' termination grace).",
    )
    scale_up_window_seconds: int = Field(
        default=0,
        ge=0,
        le=3600,
        description="Scale up to the lowest recommendation of this window (0: at once).",
    )
    scale_down_window_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="Scale down to the highest recommendation of this window; also at most one "
        "change of direction per window.",
    )


class NetworkPeer(WireModel):
    """Who may reach the serving pods: pods by labels, namespaces by labels, or both (and)."""

    namespace_selector: dict[str, str] | None = Field(
        default=None, description="matchLabels of the peers' namespaces ({}: every namespace)."
    )
    pod_selector: dict[str, str] | None = Field(
        default=None, description="matchLabels of the peer pods ({}: every pod)."
    )


class NetworkPolicySpec(WireModel):
    """An optional NetworkPolicy per pool (review M8): vLLM's API is unauthenticated and its
    metrics are open, so a namespace that shares a cluster can fence them in. Only ingress
    is restricted: vLLM pulls models and resolves names on the way out."""

    enabled: bool = False
    allow_from: tuple[NetworkPeer, ...] = Field(
        default=(),
        max_length=32,
        description="Peers allowed to the API and metrics ports; empty: the pods of the "
        "deployment's own namespace. Add the gateway's and Prometheus's namespaces.",
    )


class Toleration(WireModel):
    """A pod toleration, for GPU nodes that carry taints."""

    key: str | None = None
    operator: str | None = Field(default=None, pattern=r"^(Exists|Equal)$")
    value: str | None = Field(
        default=None,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="A label value: the API server refuses any other on a pod's toleration.",
    )
    effect: str | None = Field(default=None, pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)$")
    toleration_seconds: int | None = None


class SpeculativeDeploymentSpec(WireModel):
    """One model served with speculative decoding on every GPU type it runs on."""

    model: ModelSpec
    speculation: SpeculationSpec
    pools: tuple[PoolSpec, ...] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_POOLS,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["gpuType"],
        },
        description="Omitted: one pool per GPU type found by discovery.",
    )
    pool_defaults: PoolDefaults = PoolDefaults()
    node_selector: dict[str, str] | None = Field(
        default=None, description="Restricts discovery and scheduling to matching nodes."
    )
    tolerations: tuple[Toleration, ...] | None = None
    profiling: ProfilingSpec = ProfilingSpec()
    telemetry: TelemetrySpec = TelemetrySpec()
    vllm: VllmSpec = VllmSpec()
    network_policy: NetworkPolicySpec = NetworkPolicySpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()

    def longest_request_seconds(self) -> float | None:
        """How long the longest expected request takes at the latency target (None: unknown)."""
        a = self.autoscaling
        if a.mode is AutoscalingMode.NONE or a.tpot_target_ms is None:
            return None
        return a.max_output_tokens * a.tpot_target_ms / 1000.0

    def grace_seconds(self) -> int:
        """The serving pods' ``terminationGracePeriodSeconds``."""
        return self.vllm.grace_seconds(self.longest_request_seconds())

    def served_name(self) -> str:
        return self.model.served_model_name or self.model.name


# --- status --------------------------------------------------------------


class Phase(StrEnum):
    PENDING = "Pending"
    PROFILING = "Profiling"
    ROLLING_OUT = "RollingOut"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(WireModel):
    """A Kubernetes-style condition; lastTransitionTime moves only when status does."""

    type: str = Field(min_length=1)
    status: ConditionStatus
    reason: str = Field(min_length=1)
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ProfileSource(StrEnum):
    MEASURED = "measured"
    LIVE = "live"
    MODELLED = "modelled"
    SHIPPED = "shipped"


class LiveSource(StrEnum):
    """Which schedule a pool's table carries: re-derived from live telemetry, or the profile's."""

    LIVE = "live"
    PROFILE = "profile"


Schedule = tuple[tuple[int, int, int], ...]


class PoolLive(WireModel):
    """What telemetry says about one pool, as last recorded (written only when it moved).

    Counts are over one window (``windowSeconds``, summed over the pool's
    pods) ending at ``observedAt``; ``perPosition`` is a_i blended with the
    profile's acceptance as prior, ``halfWidth`` its 95% half-width, and
    ``confident`` whether the live estimate alone is trusted. ``schedule``
    is the table in force with its ``source``; ``profileDigest`` names the
    profile content it was derived from (another digest: ignored).
    """

    observed_at: str
    window_seconds: float = Field(ge=0)
    profile_digest: str
    sequence_steps: int = Field(default=0, ge=0)
    reached: tuple[int, ...] = ()
    proposed: tuple[int, ...] = ()
    accepted: tuple[int, ...] = ()
    per_position: tuple[float, ...] = ()
    half_width: tuple[float, ...] = ()
    drafting_rate: float | None = Field(default=None, description="At position 1.")
    confident: bool = False
    verified_per_sequence: float | None = None
    requests_per_second: float | None = None
    cost_ratio: float | None = Field(
        default=None, description="Live step time over the profile's, pooled over cells."
    )
    cost_drift_intervals: int = Field(default=0, ge=0)
    cost_drift: bool = Field(
        default=False, description="Sustained cost drift: re-profiling, the old table serving."
    )
    acceptance_drift: bool = False
    source: LiveSource = LiveSource.PROFILE
    schedule: str | None = None
    schedule_ranges: Schedule | None = None
    predicted_gain: float | None = Field(
        default=None,
        description="Predicted throughput of the table in force over the profile's (0.05: +5%).",
    )


class FloorState(StrEnum):
    """What a pool runs under the live floor (``spec.speculation.fallback: vanilla``)."""

    SPECULATING = "speculating"
    PLAIN = "plain"
    """Rolled to plain decoding (no ``--speculative-config``) on live evidence that
    speculation loses; one canary replica speculates to measure the way back."""


class PoolFloor(WireModel):
    """The live floor's state for one pool: R against plain decoding and the hysteresis.

    R is the throughput of what the pods ran (the K the add-on chose per batch
    size, K=0 included) over plain decoding's at the batch-size mix the pool
    served in the last window (live acceptance, the live-corrected cost model),
    ``ratioLow``/``ratioHigh`` its 95% bounds. The
    pool rolls to plain decoding when the upper bound stays below 1 - margin for
    the operator's losing-window count and the streak has outlasted a restart's
    cost. While plain, one surged canary replica keeps speculating: its R's lower
    bound above 1 + margin for as many windows brings the pool back; with no
    canary evidence (its pod unscheduled: no spare GPU) a timed probe does. At
    most two flips an hour. Where R cannot tell speculation from plain decoding
    (a profile's noise wider than the difference), one surged plain reference
    replica serves beside the speculating pool and the two kinds of pod are
    compared by vLLM's own time per output token (``pool.plain_reference``).
    """

    state: FloorState = FloorState.SPECULATING
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    batch_sizes: tuple[int, ...] = Field(
        default=(), description="The batch sizes served in the window R was judged over."
    )
    losing_windows: int = Field(default=0, ge=0)
    losing_since: str | None = Field(
        default=None, description="When the current losing streak's first window began."
    )
    winning_windows: int = Field(
        default=0, ge=0, description="In state plain: the canary's windows in a row that win."
    )
    canary_at: str | None = Field(
        default=None, description="In state plain: when the canary's last window was judged."
    )
    undecided_windows: int = Field(
        default=0,
        ge=0,
        description="In state speculating: windows in a row whose R told speculation from "
        "plain decoding neither way (its interval across 1 +- margin).",
    )
    undecided_since: str | None = Field(
        default=None, description="When the current run of undecided windows began."
    )
    reference_since: str | None = Field(
        default=None,
        description="In state speculating: since when one plain reference replica serves "
        "beside the pool (None: none), surged, to measure plain decoding's time per output "
        "token against the speculating pods' under the same traffic.",
    )
    reference_ratios: tuple[float, ...] = Field(
        default=(),
        description="The plain reference's windows: its time per output token over the "
        "speculating pods' (above 1: speculation is faster).",
    )
    reference_ended_at: str | None = Field(
        default=None,
        description="When the last plain reference ended (the next waits the floor's "
        "reference hold-off).",
    )
    since: str | None = Field(default=None, description="When the pool entered its state.")
    flips: tuple[str, ...] = Field(
        default=(), description="Times of the state changes within the last hour."
    )
    reason: str = ""


class ScaleLimit(StrEnum):
    """What decided a pool's wanted replica count."""

    DEMAND = "demand"
    MIN = "min"
    MAX = "max"
    GPUS = "gpus"
    """The GPUs of the pool's type in the cluster hold no more replicas."""
    NO_CAPACITY = "no-capacity"
    """No batch size meets the latency target, or no table prices one: the count is held."""
    NO_TELEMETRY = "no-telemetry"
    """No demand read yet (no Prometheus, or no window): the count is held."""


class PoolScaling(WireModel):
    """The autoscaler's view of one pool (written when the wanted count or its inputs move)."""

    scaler: AutoscalingMode
    wanted_replicas: int | None = Field(
        default=None, description="Replicas the capacity model asks for, within the bounds."
    )
    limited_by: ScaleLimit
    capacity_tokens_per_second: float | None = Field(
        default=None, description="One replica's output tokens/s at the latency target."
    )
    capacity_batch_size: int | None = None
    capacity_k: int | None = None
    demand_tokens_per_second: float | None = Field(
        default=None, description="Output tokens/s asked of the pool (its queue included)."
    )


class PoolStatus(WireModel):
    """What one pool is doing, and with which table."""

    gpu_type: str
    state: Phase
    message: str = ""
    profile: str | None = None
    profile_source: ProfileSource | None = None
    profiling_job: str | None = None
    schedule: str | None = None
    predicted_gain: float | None = Field(
        default=None,
        description=(
            "The profile's best-K goodput over plain decoding's, mean over the batch sizes "
            "served (below 1: speculation predicted to lose); absent without a baseline."
        ),
    )
    speculating: bool | None = Field(
        default=None,
        description="False when the pool runs plain decoding (policy off or fallback).",
    )
    replicas: int = 0
    ready_replicas: int = 0
    live: PoolLive | None = None
    floor: PoolFloor | None = None
    autoscaling: PoolScaling | None = None


class SpeculativeDeploymentStatus(WireModel):
    """Always says what is happening and why."""

    phase: Phase = Phase.PENDING
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = Field(
        default=(),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    pools: tuple[PoolStatus, ...] = ()
    replicas: int = 0
    ready_replicas: int = 0
    endpoint: str | None = Field(
        default=None,
        description="The model's OpenAI-compatible base URL inside the cluster (its Service).",
    )


class SpeculativeDeployment(WireModel):
    """The whole resource, as the API server stores it."""

    api_version: str = API_VERSION
    kind: str = DEPLOYMENT_KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeDeploymentSpec
    status: SpeculativeDeploymentStatus | None = None
