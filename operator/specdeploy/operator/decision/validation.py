"""Is this SpeculativeDeployment spec usable? A chain of named predicates.

First the models parse the spec (types, ranges, enums: what the CRD's
OpenAPI schema checks at admission). Then each predicate looks for one kind of
violation and yields one message per offending field, the message starting
with that field's path. The predicate's name, in CamelCase, is the reason of
the ``Valid=False`` condition; the reason strings are documentation.

Admission already enforces what CEL can (``api.py``), but an object may have
been stored under an older CRD, or the CRD installed without CEL support, so
everything is re-checked here. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specdeploy.operator.api import (
    GPU_PRODUCT_LABEL,
    METHODS_NEEDING_DRAFT,
    METHODS_WITHOUT_DRAFT,
    AutoscalingMode,
    Policy,
    PoolDefaults,
    ProfilerBackend,
    SpeculativeDeploymentSpec,
)

Predicate = Callable[[SpeculativeDeploymentSpec], Iterator[str]]

# Flags the operator sets itself, or that break what it relies on; extraArgs
# setting them would break the pod (a second --speculative-config replaces the
# table), its Service and probes (--uds, --headless), or the add-on (data
# parallelism: ranks choosing K alone could deadlock).
MANAGED_FLAGS = frozenset(
    {
        "--speculative-config",
        "--scheduler-cls",
        "--port",
        "--host",
        "--uds",
        "--headless",
        "--tensor-parallel-size",
        "-tp",
        "--data-parallel-size",
        "-dp",
        "--served-model-name",
        "--revision",
        "--dtype",
        "--shutdown-timeout",
        "--model",
    }
)


def flag_name(arg: str) -> str:
    """The flag an argument sets, as vLLM's parser reads it: ``--speculative_config.x=1``
    and ``--Speculative-Config`` are ``--speculative-config`` (vLLM turns ``_`` into ``-``
    and accepts dotted keys into a JSON flag)."""
    name = arg.split("=", 1)[0].strip().lower()
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-").split(".", 1)[0]
    return name


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Problem:
    """One violation: ``reason`` names the check, ``message`` starts with the field."""

    reason: str
    message: str


@dataclass(frozen=True)
class Validation:
    """The parsed spec when it is valid, else every problem found."""

    spec: SpeculativeDeploymentSpec | None
    problems: tuple[Problem, ...]

    @property
    def valid(self) -> bool:
        return self.spec is not None and not self.problems


# --- predicates, each named after the violation it detects -----------------


def draft_model_missing(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    s = spec.speculation
    if s.method.value in METHODS_NEEDING_DRAFT and s.draft_model is None:
        yield f"spec.speculation.draftModel: required by method {s.method.value}"


def draft_model_unused(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    s = spec.speculation
    if s.method.value in METHODS_WITHOUT_DRAFT and s.draft_model is not None:
        yield f"spec.speculation.draftModel: method {s.method.value} drafts without a model"


def fixed_k_missing(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    s = spec.speculation
    if s.policy is Policy.FIXED and s.fixed_k is None:
        yield "spec.speculation.fixedK: required when spec.speculation.policy is fixed"


def fixed_k_exceeds_max_k(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    s = spec.speculation
    if s.fixed_k is not None and s.fixed_k > s.max_k:
        yield f"spec.speculation.fixedK: {s.fixed_k} exceeds spec.speculation.maxK={s.max_k}"


def _replica_problem(path: str, shape: PoolDefaults) -> Iterator[str]:
    r = shape.replicas
    if r.max is not None and r.min > r.max:
        yield f"{path}.replicas.min: {r.min} exceeds {path}.replicas.max={r.max}"


def replicas_min_exceeds_max(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    yield from _replica_problem("spec.poolDefaults", spec.pool_defaults)
    for i, pool in enumerate(spec.pools or ()):
        yield from _replica_problem(f"spec.pools[{i}]", pool)


def autoscaling_target_missing(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    a = spec.autoscaling
    if a.mode is not AutoscalingMode.NONE and a.tpot_target_ms is None:
        yield (
            f"spec.autoscaling.tpotTargetMs: required with mode {a.mode.value} (the latency "
            "target decides how many tokens/s one replica serves)"
        )


def autoscaling_hpa_below_one(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    if spec.autoscaling.mode is not AutoscalingMode.HPA:
        return
    shapes = [("spec.poolDefaults", spec.pool_defaults)] + [
        (f"spec.pools[{i}]", p) for i, p in enumerate(spec.pools or ())
    ]
    for path, shape in shapes:
        if shape.replicas.min < 1:
            yield (
                f"{path}.replicas.min: 0 with autoscaling mode hpa: an HPA keeps at least 1 "
                "replica (mode keda can scale to zero)"
            )


def pool_gpu_type_repeated(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    seen: dict[str, int] = {}
    for i, pool in enumerate(spec.pools or ()):
        if pool.gpu_type in seen:
            first = seen[pool.gpu_type]
            yield f"spec.pools[{i}].gpuType: {pool.gpu_type} is already spec.pools[{first}]"
        seen.setdefault(pool.gpu_type, i)


def pool_excluded_by_node_selector(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    wanted = (spec.node_selector or {}).get(GPU_PRODUCT_LABEL)
    for i, pool in enumerate(spec.pools or ()):
        if wanted is not None and pool.gpu_type != wanted:
            yield (
                f"spec.pools[{i}].gpuType: {pool.gpu_type} is excluded by "
                f"spec.nodeSelector[{GPU_PRODUCT_LABEL}]={wanted}"
            )


def _labels_malformed(field: str, labels: Mapping[str, str] | None) -> Iterator[str]:
    for key, value in (labels or {}).items():
        if not _LABEL_KEY.match(key):
            yield f"{field}: {key!r} is not a valid label key"
        elif not _LABEL_VALUE.match(value):
            yield f"{field}[{key}]: {value!r} is not a valid label value"


def node_selector_malformed(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    yield from _labels_malformed("spec.nodeSelector", spec.node_selector)


def network_peers_malformed(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    """Peers the API server would refuse on the NetworkPolicy, or that admit no one."""
    for i, peer in enumerate(spec.network_policy.allow_from):
        field = f"spec.networkPolicy.allowFrom[{i}]"
        if peer.namespace_selector is None and peer.pod_selector is None:
            yield f"{field}: names neither namespaceSelector nor podSelector"
        yield from _labels_malformed(f"{field}.namespaceSelector", peer.namespace_selector)
        yield from _labels_malformed(f"{field}.podSelector", peer.pod_selector)


def annotations_malformed(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    """Pod annotations the API server would refuse on the children (review H4): keys are
    qualified names, as label keys; values at most 256 KiB together."""
    for field, given in (
        ("spec.vllm.podAnnotations", spec.vllm.pod_annotations),
        ("spec.profiling.podAnnotations", spec.profiling.pod_annotations),
    ):
        for key in given or {}:
            prefix, _, name = key.rpartition("/")
            if not _LABEL_KEY.match(key) or len(prefix) > 253 or len(name) > 63:
                yield f"{field}: {key!r} is not a valid annotation key"
        total = sum(len(k) + len(v) for k, v in (given or {}).items())
        if total > 256 * 1024:
            yield f"{field}: {total} bytes, more than the API server's 256 KiB for annotations"


def tolerations_malformed(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    """Tolerations the API server would refuse on the children (review H4)."""
    for i, t in enumerate(spec.tolerations or ()):
        where = f"spec.tolerations[{i}]"
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            yield f"{where}.tolerationSeconds: only with effect NoExecute"
        if t.operator == "Exists" and t.value:
            yield f"{where}.value: must be empty when operator is Exists"
        if not t.key and t.operator != "Exists":
            yield f"{where}.key: required unless operator is Exists"
        if t.key and not _LABEL_KEY.match(t.key):
            yield f"{where}.key: {t.key!r} is not a valid label key"


def batch_sizes_unordered(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    sizes = spec.profiling.batch_sizes
    for i, size in enumerate(sizes):
        if size < 1:
            yield f"spec.profiling.batchSizes[{i}]: {size} must be >= 1"
        elif i and size <= sizes[i - 1]:
            yield (
                f"spec.profiling.batchSizes[{i}]: {size} must be greater than "
                f"the previous size {sizes[i - 1]} (ascending, no repeats)"
            )


def sim_preset_missing(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    if spec.profiling.backend is ProfilerBackend.SIM and spec.profiling.sim_preset is None:
        yield "spec.profiling.simPreset: required when spec.profiling.backend is sim"


def extra_args_override_managed_flags(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    for i, arg in enumerate(spec.vllm.extra_args):
        flag = flag_name(arg)
        if flag in MANAGED_FLAGS:
            yield f"spec.vllm.extraArgs[{i}]: {flag} is set by the operator ({arg[:80]!r})"


def drain_longer_than_grace(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    v, grace = spec.vllm, spec.grace_seconds()
    if grace < v.pre_stop_seconds + 10:
        yield (
            f"spec.vllm.terminationGracePeriodSeconds: {grace} "
            f"leaves vLLM under 10s after the {v.pre_stop_seconds}s preStop"
        )


_QUANTITY_SUFFIX = {
    "": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


def quantity(text: str) -> float:
    """A quantity of ``api.QUANTITY_PATTERN`` as a number (``16Gi`` -> 17179869184.0)."""
    number = text.rstrip("mkMGTPEi")
    return float(number) * _QUANTITY_SUFFIX[text[len(number) :]]


def resources_request_exceeds_limit(spec: SpeculativeDeploymentSpec) -> Iterator[str]:
    given = spec.vllm.resources
    if given is None or given.requests is None or given.limits is None:
        return
    for name in ("cpu", "memory"):
        request, limit = getattr(given.requests, name), getattr(given.limits, name)
        if request is not None and limit is not None and quantity(request) > quantity(limit):
            yield (
                f"spec.vllm.resources.requests.{name}: {request} exceeds "
                f"spec.vllm.resources.limits.{name} {limit} (the API server would refuse the pods)"
            )


PREDICATES: tuple[Predicate, ...] = (
    draft_model_missing,
    draft_model_unused,
    fixed_k_missing,
    fixed_k_exceeds_max_k,
    replicas_min_exceeds_max,
    autoscaling_target_missing,
    autoscaling_hpa_below_one,
    pool_gpu_type_repeated,
    pool_excluded_by_node_selector,
    node_selector_malformed,
    network_peers_malformed,
    batch_sizes_unordered,
    annotations_malformed,
    tolerations_malformed,
    sim_preset_missing,
    extra_args_override_managed_flags,
    drain_longer_than_grace,
    resources_request_exceeds_limit,
)


def reason_of(predicate: Predicate) -> str:
    """``fixed_k_exceeds_max_k`` -> ``FixedKExceedsMaxK``."""
    return "".join(part[:1].upper() + part[1:] for part in predicate.__name__.split("_"))


# --- parsing -------------------------------------------------------------


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _schema_problems(err: ValidationError) -> tuple[Problem, ...]:
    found = []
    for e in err.errors():
        message = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        detail = "" if e["type"] == "missing" or isinstance(got, dict | list) else f" (got {got!r})"
        found.append(Problem("SchemaViolation", f"{_field_path(e['loc'])}: {message}{detail}"))
    return tuple(found)


def validate(spec: Mapping[str, Any] | None) -> Validation:
    """Parse and check a spec; every problem names its field."""
    if not isinstance(spec, Mapping):
        return Validation(None, (Problem("SchemaViolation", "spec: must be an object"),))
    try:
        parsed = SpeculativeDeploymentSpec.model_validate(dict(spec))
    except ValidationError as err:
        return Validation(None, _schema_problems(err))
    problems = tuple(
        Problem(reason_of(check), message) for check in PREDICATES for message in check(parsed)
    )
    return Validation(None if problems else parsed, problems)
