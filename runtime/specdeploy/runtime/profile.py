"""The SpeculationProfile document: model, validation, YAML/JSON load and save.

A profile is what profiling one fingerprint (model, draft, GPU type, engine,
maxK, ...) produced: step times per (batch size, K), acceptance per draft
position, and the schedule derived from them. It is shared by the profiler
(writes it), the runtime (reads the schedule and the measurements) and the
operator (stores it as a custom resource), so the rules live here once.

Validation is a chain of named checks; each problem names the field it is
about, in the document's own camelCase path, so a user can find it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError
from pydantic.alias_generators import to_camel

from specdeploy.runtime.ranges import schedule_problems

GROUP = "specdeploy.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
"""The API group and version of both custom resources (the operator's CRDs use these)."""
PROFILE_KIND = "SpeculationProfile"
PROFILE_PLURAL = "speculationprofiles"
SIM_ENGINE = "vllm-sim"
"""A modelled profile's ``engine``: the simulator standing in for vLLM (never a measurement)."""
DEPLOYMENT_KIND = "SpeculativeDeployment"
DEPLOYMENT_PLURAL = "speculativedeployments"
"""The operator's resource, named here beside the profile's so that the one kind
table (``specdeploy.runtime.kube.paths``) knows both: the runtime never imports
the operator, whose ``api`` re-exports them under the same names."""


class ProfileError(ValueError):
    """A profile document that cannot be used; ``problems`` name each field."""

    def __init__(self, problems: list[str], *, source: str = "profile") -> None:
        self.problems = problems
        super().__init__(f"invalid {source}: " + "; ".join(problems))


class WireModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields refused, frozen.

    The base of every document specdeploy reads or writes: the profile, the
    pool table (``contract.PoolTable``) and the operator's API models.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Source(StrEnum):
    """Where the numbers come from: a real engine, the simulator, or shipped."""

    MEASURED = "measured"
    MODELLED = "modelled"
    SHIPPED = "shipped"


class Fingerprint(WireModel):
    """Everything that changes step cost or acceptance; equal fingerprints share a profile."""

    model: str = Field(min_length=1)
    model_revision: str = "main"
    method: str = Field(min_length=1)
    draft_model: str | None = None
    draft_revision: str | None = None
    gpu_type: str = Field(min_length=1)
    gpus_per_replica: int = Field(default=1, ge=1)
    dtype: str = "bfloat16"
    engine: str = "vllm"
    engine_version: str = "0.32.0"
    max_k: int = Field(ge=0, le=16)

    def digest(self) -> str:
        """A stable short hash of every field (keys sorted)."""
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def profile_name(self) -> str:
        """The SpeculationProfile's name, ``p-<digest>``: one profile per fingerprint."""
        return f"p-{self.digest()}"


Rate = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


class Measurement(WireModel):
    """One measured (batch size, K, context) cell: mean step time over ``samples`` steps.

    ``acceptanceLength`` is the realized tokens per sequence per step (the
    bonus token included; a missing draft counts as a rejection), one
    meaning everywhere. ``verifiedTokens`` is the mean number of tokens a
    sequence verified per step (1 + its proposal length: n-gram drafters
    often propose fewer than K), ``contextTokens`` the mean context per
    sequence, ``draftingRate`` the share of sequence-steps with a draft at
    position 1. Profiles made before these fields existed lack them; the
    cost model then assumes K + 1 verified tokens and no context axis.
    ``prompts`` counts the distinct prompts decoded. ``itlHalfWidthMs`` is
    the 95% half-width of ``itlMs`` (batch means and repeats, t quantiles):
    where two K's goodput intervals overlap the schedule takes the smaller K
    (``schedule.derive_schedule``).
    """

    batch_size: StrictInt = Field(ge=1)
    k: StrictInt = Field(ge=0)
    itl_ms: float = Field(gt=0, allow_inf_nan=False)
    acceptance_length: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    samples: int = Field(default=1, ge=1)
    verified_tokens: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    context_tokens: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    drafting_rate: Rate | None = None
    itl_half_width_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    prompts: int | None = Field(default=None, ge=1)
    """Distinct prompts the cell decoded (a measured profile needs >= 30 per cell)."""


class Baseline(WireModel):
    """Plain decoding (no speculation configured) at one batch size: the floor to beat.

    K=0 with speculation configured is not this: vLLM still runs the
    drafter's sync pass and the speculation bookkeeping, and a K table forces
    piecewise CUDA graphs. Only this measurement can say that turning
    speculation off would be faster.
    """

    batch_size: StrictInt = Field(ge=1)
    itl_ms: float = Field(gt=0, allow_inf_nan=False)
    samples: int = Field(default=1, ge=1)
    context_tokens: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    itl_half_width_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class Acceptance(WireModel):
    """Acceptance of draft position i given positions < i accepted; a missing draft is a rejection.

    ``perPosition`` is a_i = accepted/reached (``goodput`` explains the
    counts), so AL(K) = 1 + sum prod a_j is the realized tokens per step.
    ``draftingRate`` is q_i = proposed/reached, the drafter's share of
    reached positions it proposed (1.0 for EAGLE and draft models), and
    ``proposalSurvival`` s_i = P(proposal length >= i), which prices the
    verified tokens (``cost.py``). The counts they came from are kept for
    pooling with live telemetry.
    """

    per_position: tuple[Rate, ...] = Field(min_length=1)
    samples: int | None = Field(default=None, ge=0)
    drafting_rate: tuple[Rate, ...] | None = None
    proposal_survival: tuple[Rate, ...] | None = None
    reached: tuple[Count, ...] | None = None
    proposed: tuple[Count, ...] | None = None
    accepted: tuple[Count, ...] | None = None


class ProfileSpec(WireModel):
    """The measured content of a profile; ``schedule`` is derived from the rest."""

    fingerprint: Fingerprint
    source: Source
    dataset: str | None = None
    measurements: tuple[Measurement, ...] = Field(min_length=1)
    acceptance: Acceptance
    baseline: tuple[Baseline, ...] = ()
    """Plain decoding per batch size (empty in profiles made before it was measured)."""
    # Strict ints: vLLM's table is ints, and 2.0 or "2" hides a broken generator.
    schedule: tuple[tuple[StrictInt, StrictInt, StrictInt], ...] | None = None


class Metadata(WireModel):
    """The part of Kubernetes object metadata a profile file carries."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class SpeculationProfile(WireModel):
    """The whole document, as stored in a file or as a custom resource."""

    api_version: str = API_VERSION
    kind: str = PROFILE_KIND
    metadata: Metadata = Metadata()
    spec: ProfileSpec
    status: dict[str, Any] | None = None

    def with_schedule(self, schedule: list[tuple[int, int, int]]) -> SpeculationProfile:
        """A copy with ``spec.schedule`` replaced (models are immutable)."""
        spec = self.spec.model_copy(update={"schedule": tuple(schedule)})
        return self.model_copy(update={"spec": spec})

    def to_document(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optionals left out."""
        doc: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if doc["spec"].get("schedule") is not None:
            doc["spec"]["schedule"] = [list(r) for r in doc["spec"]["schedule"]]
        return doc


# --- semantic checks -----------------------------------------------------

Check = Callable[[ProfileSpec], Iterator[str]]


def _api_identity(doc: SpeculationProfile) -> Iterator[str]:
    if doc.api_version != API_VERSION:
        yield f"apiVersion: must be {API_VERSION!r}, got {doc.api_version!r}"
    if doc.kind != PROFILE_KIND:
        yield f"kind: must be {PROFILE_KIND!r}, got {doc.kind!r}"


def _cell_key(row: Measurement) -> tuple[int, int, float]:
    return row.batch_size, row.k, row.context_tokens or 0.0


def measurements_sorted_and_unique(spec: ProfileSpec) -> Iterator[str]:
    """Rows are ordered by (batchSize, k, contextTokens) with no cell measured twice."""
    for i in range(1, len(spec.measurements)):
        prev, row = spec.measurements[i - 1], spec.measurements[i]
        here = f"spec.measurements[{i}]"
        if _cell_key(row) == _cell_key(prev):
            yield f"{here}: duplicate cell batchSize={row.batch_size} k={row.k}"
        elif _cell_key(row) < _cell_key(prev):
            yield (
                f"{here}: rows must be sorted by batchSize, k and contextTokens; "
                f"(batchSize={row.batch_size}, k={row.k}) follows "
                f"(batchSize={prev.batch_size}, k={prev.k})"
            )


def baseline_sorted_and_unique(spec: ProfileSpec) -> Iterator[str]:
    """Baseline rows are ordered by batch size (and context), each measured once."""
    keys = [(b.batch_size, b.context_tokens or 0.0) for b in spec.baseline]
    for i in range(1, len(keys)):
        if keys[i] <= keys[i - 1]:
            yield f"spec.baseline[{i}]: rows must be sorted by batchSize, each once"


def acceptance_counts_consistent(spec: ProfileSpec) -> Iterator[str]:
    """Counts, when given, have one entry per position and accepted <= proposed <= reached."""
    acc = spec.acceptance
    n = len(acc.per_position)
    for name in ("drafting_rate", "proposal_survival", "reached", "proposed", "accepted"):
        values = getattr(acc, name)
        if values is not None and len(values) != n:
            yield (
                f"spec.acceptance.{_camel(name)}: has {len(values)} positions, perPosition has {n}"
            )
    if acc.reached is not None and acc.proposed is not None and acc.accepted is not None:
        for i, (r, p, a) in enumerate(zip(acc.reached, acc.proposed, acc.accepted, strict=False)):
            if not a <= p <= r:
                yield f"spec.acceptance: position {i + 1}: need accepted <= proposed <= reached"


def k_within_max_k(spec: ProfileSpec) -> Iterator[str]:
    """No measured K exceeds the buffer size vLLM was started with."""
    max_k = spec.fingerprint.max_k
    for i, row in enumerate(spec.measurements):
        if row.k > max_k:
            yield f"spec.measurements[{i}].k: {row.k} exceeds spec.fingerprint.maxK={max_k}"


def baseline_at_every_batch_size(spec: ProfileSpec) -> Iterator[str]:
    """K=0 is measured wherever anything is: it is the never-slower baseline."""
    with_k0 = {m.batch_size for m in spec.measurements if m.k == 0}
    for bs in sorted({m.batch_size for m in spec.measurements} - with_k0):
        yield (
            f"spec.measurements: missing cell batchSize={bs} k=0 "
            "(K=0 is needed at every batch size)"
        )


def acceptance_covers_measured_k(spec: ProfileSpec) -> Iterator[str]:
    """Every measured K has an acceptance rate for each of its draft positions."""
    rates = spec.acceptance.per_position
    for i, rate in enumerate(rates):
        if not 0.0 <= rate <= 1.0:
            yield f"spec.acceptance.perPosition[{i}]: {rate} is outside [0, 1]"
    top_k = max(m.k for m in spec.measurements)
    if top_k > len(rates):
        yield (
            f"spec.acceptance.perPosition: has {len(rates)} positions but "
            f"spec.measurements goes up to k={top_k}"
        )
    if len(rates) > spec.fingerprint.max_k:
        yield (
            f"spec.acceptance.perPosition: has {len(rates)} positions, more than "
            f"spec.fingerprint.maxK={spec.fingerprint.max_k}"
        )


def schedule_follows_vllm_rules(spec: ProfileSpec) -> Iterator[str]:
    """The schedule is a valid ``num_speculative_tokens_per_batch_size``."""
    if spec.schedule is None:
        return
    for problem in schedule_problems(spec.schedule, max_k=spec.fingerprint.max_k):
        yield f"spec.schedule{problem}"


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(r.title() for r in rest)


SPEC_CHECKS: tuple[Check, ...] = (
    measurements_sorted_and_unique,
    baseline_sorted_and_unique,
    acceptance_counts_consistent,
    k_within_max_k,
    baseline_at_every_batch_size,
    acceptance_covers_measured_k,
    schedule_follows_vllm_rules,
)


def problems_of(doc: SpeculationProfile) -> list[str]:
    """Every semantic problem of a structurally valid document."""
    found = list(_api_identity(doc))
    for check in SPEC_CHECKS:
        found.extend(check(doc.spec))
    return found


# --- parsing and I/O -----------------------------------------------------


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<document>"


def _pydantic_problems(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        message = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        detail = f" (got {got!r})" if e["type"] != "missing" and not isinstance(got, dict) else ""
        problems.append(f"{_loc_to_path(tuple(e['loc']))}: {message}{detail}")
    return problems


def parse_profile(data: Any, *, source: str = "profile") -> SpeculationProfile:
    """Validate a decoded document; raise ProfileError naming every bad field."""
    if not isinstance(data, dict):
        raise ProfileError(
            [f"<document>: expected a mapping, got {type(data).__name__}"], source=source
        )
    try:
        doc = SpeculationProfile.model_validate(data)
    except ValidationError as err:
        raise ProfileError(_pydantic_problems(err), source=source) from None
    problems = problems_of(doc)
    if problems:
        raise ProfileError(problems, source=source)
    return doc


def load_profile(path: str | Path) -> SpeculationProfile:
    """Read a profile from YAML or JSON (JSON is YAML) and validate it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ProfileError([f"<file>: cannot read {p}: {err.strerror}"], source=str(p)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ProfileError([f"<file>: not valid YAML/JSON: {err}"], source=str(p)) from None
    return parse_profile(data, source=str(p))


def dump_profile(doc: SpeculationProfile, *, fmt: str = "yaml") -> str:
    """Serialise after re-validating, so an invalid profile is never written."""
    parse_profile(doc.to_document())
    data = doc.to_document()
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    raise ValueError(f"unknown format {fmt!r}: use yaml or json")


def save_profile(doc: SpeculationProfile, path: str | Path) -> None:
    """Write atomically (temp file + rename): a reader never sees half a table."""
    p = Path(path)
    text = dump_profile(doc, fmt="json" if p.suffix == ".json" else "yaml")
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)
