"""Pure helpers on manifests: subset comparison, merge patches, content hashes, apply hashes.

An owned child carries the hash of the content the operator applied
(``APPLIED_HASH``); it is re-applied only when that hash or a hand edit says
so, which is what makes a reconcile with nothing to change write nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from specdeploy.operator.builders.common import APPLIED_HASH, Manifest

Ref = tuple[str, str]
"""(kind, name) of a child."""


def is_subset(wanted: Any, actual: Any) -> bool:
    """Whether everything in ``wanted`` is in ``actual`` (the server may add defaults).

    Mappings: each wanted key present with a subset value. Lists of named items
    (containers, volumes, env, ports: lists the API merges by name): each wanted
    item present by name with a subset value, whatever else is there - a mutating
    admission webhook's sidecar, or another field manager's env, is theirs under
    server-side apply, not a change to undo (review M3: such a pool stayed
    RollingOut, re-applied on every reconcile). Other lists: same length,
    element-wise subsets (the server defaults fields inside list items but never
    adds items). Scalars: equal.
    """
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and is_subset(v, actual[k]) for k, v in wanted.items()
        )
    if _named_items(wanted) and _named_items(actual):
        by_name = {item["name"]: item for item in actual}
        return all(w["name"] in by_name and is_subset(w, by_name[w["name"]]) for w in wanted)
    if isinstance(wanted, Sequence) and not isinstance(wanted, str):
        return (
            isinstance(actual, Sequence)
            and not isinstance(actual, str)
            and len(wanted) == len(actual)
            and all(is_subset(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    return bool(wanted == actual)


def _named_items(value: Any) -> bool:
    """A non-empty list whose items are all mappings with a ``name`` (a list map by name)."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and bool(value)
        and all(isinstance(item, Mapping) and "name" in item for item in value)
    )


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """An RFC 7386 merge patch turning ``old`` into ``new`` (nulls delete keys)."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        prior = old.get(key)
        if value is None:  # null deletes: nothing to do for a key already absent
            if key in old:
                patch[key] = None
            continue
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


def ref_of(manifest: Mapping[str, Any]) -> Ref:
    return str(manifest["kind"]), str(manifest["metadata"]["name"])


_IDENTITY = frozenset({"apiVersion", "kind", "metadata", "status"})


def applied_hash(manifest: Mapping[str, Any]) -> str:
    """The hash of a manifest's content, its own hash annotation left out."""
    meta = dict(manifest["metadata"])
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if k != APPLIED_HASH}
    meta["annotations"] = annotations
    return content_hash({**manifest, "metadata": meta})


def with_applied_hash(manifest: Manifest) -> Manifest:
    """The manifest carrying the hash of its own content, to recognise it later."""
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), APPLIED_HASH: applied_hash(manifest)}
    return {**manifest, "metadata": meta}


def needs_apply(manifest: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    """Whether an owned child must be (re)applied: absent, changed, or edited by hand."""
    if existing is None:
        return True
    annotations = (existing.get("metadata") or {}).get("annotations") or {}
    if annotations.get(APPLIED_HASH) != applied_hash(manifest):
        return True
    # Items of a List carry no apiVersion/kind: compare the content only.
    content = {k: v for k, v in manifest.items() if k not in _IDENTITY}
    return not is_subset(content, existing)
