"""The operator→serving-pod contract: what the operator writes into a vLLM pod, the add-on reads.

Both sides import this module (the operator may import the runtime; the
runtime never imports the operator), so a rename here is a rename on both
sides, and ``tests/unit/contracts/`` feeds what the operator's builders emit
into what the add-on reads. It holds:

* ``Policy``: how a pod chooses K (also the CRD's ``speculation.policy`` enum);
* ``PoolTable``: the table ConfigMap's ``table.json``, typed;
* ``TABLE_FILE`` and ``PROFILE_FILE``: the ConfigMap's keys, which are the
  file names in the mounted directory;
* ``PodEnv``: the environment variables the operator sets and the add-on reads;
* ``SCHEDULER_CLS``: the add-on's import path for vLLM's ``--scheduler-cls``.

Pure: pydantic only, no I/O.
"""

from __future__ import annotations

import json
from enum import StrEnum

from pydantic import Field, StrictInt, ValidationError

from specdeploy.runtime.profile import WireModel

TABLE_FILE = "table.json"
"""The pool's K table in the ConfigMap, and its file name where the ConfigMap is mounted."""
PROFILE_FILE = "profile.json"
"""The profile's spec (the adaptive policy's prior), mounted beside the table."""
SCHEDULER_CLS = "specdeploy.runtime.vllm_addon.scheduler_factory"
"""The add-on's scheduler factory, passed to vLLM as ``--scheduler-cls``."""
ENV_PREFIX = "SPECDEPLOY_"


class Policy(StrEnum):
    """How the pod chooses K: adaptive (table + live telemetry), the profiled
    table alone, one fixed K, or no speculation at all."""

    ADAPTIVE = "adaptive"
    TABLE = "table"
    FIXED = "fixed"
    OFF = "off"


class PodEnv(StrEnum):
    """Environment variables of the add-on; the operator sets the first five."""

    TABLE_FILE = ENV_PREFIX + "TABLE_FILE"
    POLICY = ENV_PREFIX + "POLICY"
    METRICS_PORT = ENV_PREFIX + "METRICS_PORT"
    POOL = ENV_PREFIX + "POOL"
    PROFILE = ENV_PREFIX + "PROFILE"
    PROFILE_FILE = ENV_PREFIX + "PROFILE_FILE"
    METRICS_ADDR = ENV_PREFIX + "METRICS_ADDR"
    RELOAD_SECONDS = ENV_PREFIX + "RELOAD_SECONDS"
    ALLOWED_K = ENV_PREFIX + "ALLOWED_K"
    ADAPTIVE = ENV_PREFIX + "ADAPTIVE"
    CONFIG_FILE = ENV_PREFIX + "CONFIG_FILE"

    @property
    def key(self) -> str:
        """The setting's name in a config file: lower case, without the prefix."""
        return self.value.removeprefix(ENV_PREFIX).lower()


Range = tuple[StrictInt, StrictInt, StrictInt]


class PoolTable(WireModel):
    """``table.json``: the pool's K schedule and how to use it.

    ``schedule`` has vLLM's ``num_speculative_tokens_per_batch_size`` shape
    (``[lo, hi, K]`` ranges). Fields the file may omit take the engine's
    values at the add-on: ``policy`` its configured policy, ``maxK`` the
    engine's ``num_speculative_tokens``. What needs the engine to check (maxK
    against the engine, ranges against its batch size) is the add-on's.
    """

    policy: Policy | None = None
    max_k: StrictInt | None = Field(default=None, ge=0)
    fixed_k: StrictInt | None = None
    profile: str | None = None
    schedule: tuple[Range, ...] = ()

    def to_json(self) -> str:
        """The bytes the operator writes (keys sorted: the same table, the same bytes)."""
        return json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)

    @classmethod
    def from_json(cls, data: bytes | str, *, source: str = TABLE_FILE) -> PoolTable:
        """Parse ``table.json``; a ``TableDocumentError`` names the field that is wrong."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as err:
            raise TableDocumentError(source, err) from None


class TableDocumentError(ValueError):
    """A ``table.json`` that does not parse; the message names the file and each field."""

    def __init__(self, source: str, err: ValidationError) -> None:
        problems = []
        for e in err.errors(include_url=False):
            if e["type"] == "json_invalid":
                problems.append(f"not valid JSON: {e['msg']}")
                continue
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
            problems.append(f"{where.lstrip('.') or '(document)'}: {e['msg']} (got {e['input']!r})")
        super().__init__(f"{source}: " + "; ".join(problems))
