"""The table ConfigMap of one pool: what the scheduler add-on reads, and re-reads.

Its keys are the contract's file names (``specdeploy.runtime.contract``):
``table.json`` is a ``PoolTable`` (the K schedule in vLLM's
``num_speculative_tokens_per_batch_size`` shape, maxK, the policy);
``profile.json`` the profile's measurements and acceptance, the adaptive
policy's prior. The pod mounts the ConfigMap as a directory, so an update
reaches a running pod without a restart.
"""

from __future__ import annotations

import json
from typing import Any

from specdeploy.operator.builders.common import TABLE, Manifest, Parent, metadata, parent_labels
from specdeploy.runtime.contract import PROFILE_FILE, TABLE_FILE, PoolTable


def table_configmap(
    parent: Parent,
    *,
    name: str,
    gpu_type: str,
    table: PoolTable,
    profile_spec: dict[str, Any] | None,
) -> Manifest:
    data = {TABLE_FILE: table.to_json()}
    if profile_spec is not None:
        data[PROFILE_FILE] = json.dumps(profile_spec, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(parent, name, parent_labels(parent, TABLE, gpu_type)),
        "data": data,
    }
