"""The table ConfigMap of one pool: what the scheduler add-on reads, and re-reads.

``table.json`` holds the K schedule (vLLM's ``num_speculative_tokens_per_batch_size``
shape), maxK and the policy; ``profile.json`` the profile's measurements and
acceptance, the adaptive policy's prior. The pod mounts the ConfigMap as a
directory, so an update reaches a running pod without a restart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from specdeploy.operator.builders.common import TABLE, Manifest, Parent, metadata, parent_labels

TABLE_KEY = "table.json"
PROFILE_KEY = "profile.json"


def table_document(
    *,
    policy: str,
    max_k: int,
    fixed_k: int | None,
    schedule: Sequence[Sequence[int]],
    profile: str | None,
) -> dict[str, Any]:
    return {
        "policy": policy,
        "maxK": max_k,
        "fixedK": fixed_k,
        "profile": profile,
        "schedule": [list(r) for r in schedule],
    }


def table_configmap(
    parent: Parent,
    *,
    name: str,
    gpu_type: str,
    table: dict[str, Any],
    profile_spec: dict[str, Any] | None,
) -> Manifest:
    data = {TABLE_KEY: json.dumps(table, sort_keys=True)}
    if profile_spec is not None:
        data[PROFILE_KEY] = json.dumps(profile_spec, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(parent, name, parent_labels(parent, TABLE, gpu_type)),
        "data": data,
    }
