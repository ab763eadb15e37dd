"""Reading the pool's table (and profile) and turning it into the K policy the engine runs.

The operator writes two keys into the pool's ConfigMap (the contract's
``TABLE_FILE`` and ``PROFILE_FILE``, ``specdeploy.runtime.contract``):
``table.json``, a ``PoolTable`` ({policy, maxK, fixedK, profile, schedule}),
and, for profiled pools, ``profile.json`` (the SpeculationProfile's spec, the
adaptive policy's prior). The table's shape is the contract model's to check;
what only the engine can judge (maxK against the engine, K against maxK,
ranges against its batch size) is checked here. Everything here is checked before it is used and
every failure is a ``TableError`` whose message names the file and field, so
the reloader can keep the last good table and say exactly what is wrong.

The engine constrains every table: K values outside ``allowed`` (the K set the
engine started with: CUDA graphs are captured for those shapes) are clamped
down into it by the controller, and a maxK above the engine's
``num_speculative_tokens`` is refused (KV lookahead and draft buffers are
sized at start; changing maxK needs a restart).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.runtime.contract import (
    PROFILE_FILE,
    TABLE_FILE,
    Policy,
    PoolTable,
    TableDocumentError,
)
from specdeploy.runtime.policy.adaptive import AdaptivePolicy
from specdeploy.runtime.policy.base import KPolicy
from specdeploy.runtime.policy.config import AdaptiveConfig
from specdeploy.runtime.policy.static import FixedPolicy, TablePolicy
from specdeploy.runtime.profile import (
    API_VERSION,
    PROFILE_KIND,
    ProfileError,
    ProfileSpec,
    parse_profile,
)
from specdeploy.runtime.ranges import ScheduleError, expand_lookup
from specdeploy.runtime.schedule import k_values


class TableError(ValueError):
    """A table or profile file the engine must not use; the message says why."""


@dataclass(frozen=True)
class EngineShape:
    """What the engine fixed at start and every table must fit."""

    num_speculative_tokens: int
    max_batch_size: int
    allowed_k: tuple[int, ...]
    """Sorted K values the policy may use."""


@dataclass(frozen=True)
class LoadedTable:
    """A checked table and the policy built from it (None: policy off, vLLM's own lookup)."""

    policy_kind: str
    policy: KPolicy | None
    schedule: tuple[tuple[int, int, int], ...]
    profile_name: str
    digest: str
    """sha256 of the files' bytes: the same content is never reloaded."""
    drafting_rate: float | None = None
    """The profile's drafting rate at position 1 (``acceptance.draftingRate[0]``), when the
    pool has a profile that records it: the reference of the drafting-rate warning."""
    acceptance: tuple[float, ...] = ()
    """The profile's a_i per position (empty without a profile): exported so an alert
    can compare live acceptance with what the table was computed for."""


def read_files(table_file: Path, profile_file: Path | None) -> tuple[bytes, bytes | None]:
    """The raw bytes of the table and (when present) the profile."""
    try:
        table = table_file.read_bytes()
    except OSError as err:
        raise TableError(f"{table_file}: cannot read: {err.strerror}") from None
    profile = None
    if profile_file is not None:
        try:
            profile = profile_file.read_bytes()
        except FileNotFoundError:
            profile = None
        except OSError as err:
            raise TableError(f"{profile_file}: cannot read: {err.strerror}") from None
    return table, profile


def digest_of(table: bytes, profile: bytes | None) -> str:
    h = hashlib.sha256(table)
    h.update(b"\0")
    h.update(profile or b"")
    return h.hexdigest()


def load_table(
    table: bytes,
    profile: bytes | None,
    shape: EngineShape,
    *,
    default_policy: str,
    adaptive: AdaptiveConfig,
    table_name: str = TABLE_FILE,
    profile_name: str = PROFILE_FILE,
) -> LoadedTable:
    """Check the files and build the policy they ask for, or raise TableError."""
    try:
        doc = PoolTable.from_json(table, source=table_name)
    except TableDocumentError as err:
        raise TableError(str(err)) from None
    kind = doc.policy or Policy(default_policy)
    max_k = _max_k(doc, table_name, shape)
    schedule = _schedule(doc, table_name, max_k)
    policy: KPolicy | None
    spec: ProfileSpec | None = None
    if kind is Policy.OFF:
        policy = None
    elif kind is Policy.FIXED:
        policy = FixedPolicy(_fixed_k(doc, table_name, max_k))
    else:
        lookup = _lookup(schedule, table_name, shape)
        if kind is Policy.TABLE:
            policy = TablePolicy(lookup)
        else:
            spec = _profile_spec(profile, profile_name)
            policy = _adaptive_policy(spec, lookup, shape, adaptive, profile_name)
    if spec is None and profile is not None:
        spec = _optional_profile_spec(profile, profile_name)
    return LoadedTable(
        policy_kind=kind.value,
        policy=policy,
        schedule=schedule,
        profile_name=doc.profile or "",
        digest=digest_of(table, profile),
        drafting_rate=None if spec is None else drafting_rate_of(spec),
        acceptance=() if spec is None else tuple(float(a) for a in spec.acceptance.per_position),
    )


def drafting_rate_of(spec: ProfileSpec) -> float | None:
    """The profile's drafting rate at position 1, when it records one."""
    rates = spec.acceptance.drafting_rate
    return float(rates[0]) if rates else None


def clamp_map(allowed: Sequence[int], num_speculative_tokens: int) -> list[int]:
    """``m[k]``: the largest allowed K <= k (the smallest allowed K when none is)."""
    ordered = sorted(allowed)
    out = []
    for k in range(num_speculative_tokens + 1):
        below = [a for a in ordered if a <= k]
        out.append(below[-1] if below else ordered[0])
    return out


# --- the parts --------------------------------------------------------------


def _json_object(data: bytes, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TableError(f"{name}: not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise TableError(f"{name}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _max_k(doc: PoolTable, name: str, shape: EngineShape) -> int:
    max_k = shape.num_speculative_tokens if doc.max_k is None else doc.max_k
    if max_k > shape.num_speculative_tokens:
        raise TableError(
            f"{name}: maxK: {max_k} exceeds the engine's num_speculative_tokens "
            f"{shape.num_speculative_tokens} (sized at start; a larger maxK needs a restart)"
        )
    return int(max_k)


def _schedule(doc: PoolTable, name: str, max_k: int) -> tuple[tuple[int, int, int], ...]:
    for i, (_, _, k) in enumerate(doc.schedule):
        if k > max_k:
            raise TableError(f"{name}: schedule[{i}]: K={k} exceeds maxK {max_k}")
    return tuple((int(a), int(b), int(c)) for a, b, c in doc.schedule)


def _lookup(schedule: tuple[tuple[int, int, int], ...], name: str, shape: EngineShape) -> list[int]:
    if not schedule:
        raise TableError(f"{name}: schedule: must not be empty for a table or adaptive policy")
    try:
        return expand_lookup(
            [list(r) for r in schedule], shape.num_speculative_tokens, shape.max_batch_size
        )
    except (ScheduleError, ValueError) as err:
        raise TableError(f"{name}: schedule: {err}") from None


def _fixed_k(doc: PoolTable, name: str, max_k: int) -> int:
    k = doc.fixed_k
    if k is None or not 0 <= k <= max_k:
        raise TableError(f"{name}: fixedK: must be an integer in 0..{max_k}, got {k!r}")
    return k


def _profile_spec(data: bytes | None, name: str) -> ProfileSpec:
    if data is None:
        raise TableError(f"{name}: missing, and the adaptive policy needs the profile")
    spec = _json_object(data, name)
    try:
        return parse_profile({"apiVersion": API_VERSION, "kind": PROFILE_KIND, "spec": spec}).spec
    except ProfileError as err:
        raise TableError(f"{name}: {err}") from None


def _optional_profile_spec(data: bytes, name: str) -> ProfileSpec | None:
    """The profile beside a table or fixed policy, which only the drafting-rate warning reads:
    one that does not parse is ignored (the policy does not need it)."""
    try:
        return _profile_spec(data, name)
    except TableError:
        return None


def _adaptive_policy(
    spec: ProfileSpec,
    lookup: list[int],
    shape: EngineShape,
    config: AdaptiveConfig,
    name: str,
) -> AdaptivePolicy:
    """The profile's full model (cost by verified tokens and context, acceptance, proposal
    lengths, baseline), restricted to the K values the engine allows."""
    usable = sorted(set(k_values(spec)) & set(shape.allowed_k))
    if not usable:
        raise TableError(
            f"{name}: measures K {list(k_values(spec))}, none of which the engine allows "
            f"({list(shape.allowed_k)})"
        )
    clamp = clamp_map(usable, shape.num_speculative_tokens)
    fallback = [clamp[min(k, shape.num_speculative_tokens)] for k in lookup]
    try:
        return AdaptivePolicy.from_profile(
            spec,
            config,
            max_batch_size=shape.max_batch_size,
            allowed_k=usable,
            fallback=fallback,
        )
    except ValueError as err:
        raise TableError(f"{name}: {err}") from None
