"""Profiles written by the harness in the profiler's place (emulated; review §5.4 F3).

Fuzzed specs hold their pods back (``strategies.HOLD``), so no profiler runs.
To take valid specs on to the serving builders (ConfigMap, Deployment, PDB),
the harness reads each profiling Job's fingerprint annotation and writes a
small modelled SpeculationProfile under the name the Job states, as the
profiler would at its end. Its figures are made up and say so
(``source: modelled``, a ``specdeploy-fuzz/landed`` label); they only need
to be a profile the runtime's own rules accept.

F3: for some Jobs the profile written under the expected name holds another
fingerprint (one field changed). The operator must never serve it (review
M12): no serving Deployment for that pool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specdeploy.runtime.profile import Fingerprint, parse_profile

FINGERPRINT_ANNOTATION = "specdeploy.io/fingerprint"
LANDED_LABEL = "specdeploy-fuzz/landed"
MISMATCHES = ("maxK", "gpuType", "model", "engineVersion")
"""The fingerprint fields an F3 profile changes, in turn."""


def fingerprint_of(job: Mapping[str, Any]) -> Fingerprint | None:
    """The fingerprint a profiling Job names its profile by (its annotation)."""
    raw = (job["metadata"].get("annotations") or {}).get(FINGERPRINT_ANNOTATION)
    return Fingerprint.model_validate(json.loads(raw)) if raw else None


def mismatched(fingerprint: Fingerprint, which: int) -> Fingerprint:
    """``fingerprint`` with one field changed (``MISMATCHES[which % 4]``)."""
    field = MISMATCHES[which % len(MISMATCHES)]
    changes: dict[str, dict[str, Any]] = {
        "maxK": {"max_k": 1 if fingerprint.max_k != 1 else 2},
        "gpuType": {"gpu_type": fingerprint.gpu_type + "-other"},
        "model": {"model": fingerprint.model + "-other"},
        "engineVersion": {"engine_version": fingerprint.engine_version + ".1"},
    }
    return fingerprint.model_copy(update=changes[field])


def profile_document(name: str, namespace: str, fingerprint: Fingerprint) -> dict[str, Any]:
    """A modelled profile of ``fingerprint`` stored as ``name``; checked by the runtime's rules.

    K from 0 to maxK at batch sizes 1 and 4096 (every size the spec may serve lies
    between), acceptance falling along the positions, and a plain-decoding baseline."""
    max_k = fingerprint.max_k
    per_position = [round(0.8 * 0.9**i, 4) for i in range(max(1, max_k))]
    rows = []
    for batch in (1, 4096):
        base = 6.0 if batch == 1 else 60.0
        for k in range(max_k + 1):
            accepted = 1.0 + sum(_prefix_product(per_position, i) for i in range(1, k + 1))
            row: dict[str, Any] = {"batchSize": batch, "k": k, "itlMs": base * (1 + 0.05 * k)}
            if k:
                row["acceptanceLength"] = round(accepted, 4)
            rows.append(row)
    doc = {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculationProfile",
        "metadata": {"name": name, "namespace": namespace, "labels": {LANDED_LABEL: "true"}},
        "spec": {
            "fingerprint": fingerprint.model_dump(mode="json", by_alias=True, exclude_none=True),
            "source": "modelled",
            "dataset": "fuzz",
            "measurements": rows,
            "acceptance": {"perPosition": per_position},
            "baseline": [{"batchSize": 1, "itlMs": 5.9}, {"batchSize": 4096, "itlMs": 59.0}],
        },
    }
    parse_profile(doc, source=f"landed profile {name}")  # the harness's own bug fails here
    return doc


def _prefix_product(rates: list[float], upto: int) -> float:
    product = 1.0
    for rate in rates[:upto]:
        product *= rate
    return product


def fingerprint_of_profile(profile: Mapping[str, Any]) -> str | None:
    """The profile name a stored profile's own fingerprint maps to (None: unreadable)."""
    try:
        return Fingerprint.model_validate(profile["spec"]["fingerprint"]).profile_name()
    except (KeyError, ValueError):
        return None
