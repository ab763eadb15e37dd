"""Pure dict helpers: subset comparison, merge patches, content hashes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def is_subset(wanted: Any, actual: Any) -> bool:
    """Whether everything in ``wanted`` is in ``actual`` (the server may add defaults).

    Mappings: each wanted key present with a subset value. Lists: same length,
    element-wise subsets (the server defaults fields inside list items but never
    adds items). Scalars: equal.
    """
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and is_subset(v, actual[k]) for k, v in wanted.items()
        )
    if isinstance(wanted, Sequence) and not isinstance(wanted, str):
        return (
            isinstance(actual, Sequence)
            and not isinstance(actual, str)
            and len(wanted) == len(actual)
            and all(is_subset(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    return bool(wanted == actual)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """An RFC 7386 merge patch turning ``old`` into ``new`` (nulls delete keys)."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        prior = old.get(key)
        if isinstance(value, Mapping) and isinstance(prior, Mapping):
            sub = merge_patch(prior, value)
            if sub:
                patch[key] = sub
        elif key not in old or prior != value:
            patch[key] = value
    return patch


def content_hash(obj: Any) -> str:
    """A stable hash of a JSON-able value (keys sorted)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
