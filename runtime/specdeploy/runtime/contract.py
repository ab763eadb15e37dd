"""The operator↔serving-pod contract: what the operator writes into a vLLM pod, the add-on
reads, and what the add-on exports that the operator and the dashboards read back.

Both sides import this module (the operator may import the runtime; the
runtime never imports the operator), so a rename here is a rename on both
sides, and ``tests/unit/contracts/`` feeds what the operator's builders emit
into what the add-on reads. It holds:

* ``Policy``: how a pod chooses K (also the CRD's ``speculation.policy`` enum);
* ``PoolTable``: the table ConfigMap's ``table.json``, typed;
* ``TABLE_FILE`` and ``PROFILE_FILE``: the ConfigMap's keys, which are the
  file names in the mounted directory;
* ``PodEnv``: the environment variables the operator sets and the add-on reads;
* ``SCHEDULER_CLS``: the add-on's import path for vLLM's ``--scheduler-cls``;
* the pod -> operator half: ``Series`` (the add-on's metric families),
  ``SeriesLabel`` (their labels) and the batch-size buckets of the step-time
  histogram (``bucket_of``, ``bucket_bounds``, ``bucket_label``,
  ``bucket_index``), which the add-on, its policies, the operator's queries
  and estimates, and the dashboards all read from here.

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


# --- the pod -> operator half: series, labels, batch-size buckets ------------------


STATELESS_DRAFTERS = frozenset({"ngram"})
"""Speculative methods whose drafter keeps no state between steps (the CPU n-gram
proposer): with the add-on's plugin a K=0 step runs no drafter, a plain step."""
K0_PASS_DRAFTERS = frozenset({"eagle", "eagle3", "draft_model"})
"""Methods whose drafter runs a pass at K=0 (its KV cache follows the target's tokens)
and proposes nothing; the add-on times that pass (``vllm_addon.k0_pass``)."""


class Series(StrEnum):
    """The add-on's metric families by base name (``prometheus_client``'s): a counter is
    scraped as ``<name>_total``, the step-time histogram as ``_bucket``/``_sum``/``_count``."""

    STEPS = "specdeploy_steps"
    K = "specdeploy_k"
    BATCH_SIZE = "specdeploy_batch_size"
    REACHED = "specdeploy_draft_positions_reached"
    PROPOSED = "specdeploy_draft_tokens"
    ACCEPTED = "specdeploy_accepted_tokens"
    VERIFIED = "specdeploy_verified_tokens"
    SEQUENCE_STEPS = "specdeploy_decode_sequence_steps"
    STEP_SECONDS = "specdeploy_step_seconds"
    STEP_BATCH_SIZES = "specdeploy_step_batch_sizes"
    DRAFTING_RATE = "specdeploy_drafting_rate"
    DRAFTING_RATE_PROFILE = "specdeploy_drafting_rate_profile"
    DRAFTING_RATE_DRIFT = "specdeploy_drafting_rate_drift"
    DRAFTING_RATE_DRIFT_WINDOWS = "specdeploy_drafting_rate_drift_windows"
    ACCEPTANCE_PROFILE = "specdeploy_acceptance_profile"
    PREDICTED_GOODPUT = "specdeploy_predicted_goodput_tokens_per_second"
    PREDICTED_GAIN = "specdeploy_predicted_gain_over_vanilla"
    TABLE_GENERATION = "specdeploy_table_generation"
    TABLE_INFO = "specdeploy_table_info"
    TABLE_RELOAD_ERRORS = "specdeploy_table_reload_errors"
    POLICY_ERRORS = "specdeploy_policy_errors"
    ADDON_FAULTS = "specdeploy_addon_faults"
    EXPLORATION_STEPS = "specdeploy_exploration_steps"
    PLAIN_REFERENCE_STEPS = "specdeploy_plain_reference_steps"
    K0_PASS_SECONDS = "specdeploy_drafter_k0_pass_seconds"
    K0_PASSES = "specdeploy_drafter_k0_passes"

    @property
    def total(self) -> str:
        """A counter's scraped name."""
        return f"{self.value}_total"

    @property
    def histogram_sum(self) -> str:
        """A histogram's sum."""
        return f"{self.value}_sum"

    @property
    def histogram_count(self) -> str:
        """A histogram's count."""
        return f"{self.value}_count"

    @property
    def histogram_buckets(self) -> str:
        """A histogram's cumulative buckets."""
        return f"{self.value}_bucket"


class SeriesLabel(StrEnum):
    """Labels the add-on puts on its series (beside the scrape's own)."""

    POOL = "pool"
    POSITION = "position"
    """Draft position, 1-based."""
    BATCH_BUCKET = "batch_bucket"
    """The batch-size bucket of a step (``bucket_label``)."""
    K = "k"


def bucket_of(batch_size: int) -> int:
    """Power-of-two batch-size bucket: 1 | 2 | 3-4 | 5-8 | 9-16 | ... (0, 1, 2, ...)."""
    return (batch_size - 1).bit_length()


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """Inclusive batch-size range of a bucket."""
    return (1, 1) if bucket == 0 else ((1 << (bucket - 1)) + 1, 1 << bucket)


def bucket_label(batch_size: int) -> str:
    """The bucket of a batch size as the add-on labels it: "1", "2", "3-4", "5-8", ..."""
    lo, hi = bucket_bounds(bucket_of(max(batch_size, 1)))
    return str(lo) if lo == hi else f"{lo}-{hi}"


def bucket_index(label: str) -> int | None:
    """A bucket label ("1", "2", "3-4", ...) back as its bucket number; None: not one."""
    try:
        top = int(label.split("-")[-1])
    except ValueError:
        return None
    return bucket_of(top) if top >= 1 else None
