"""What must hold for one fuzzed spec, given what the API server shows afterwards. Pure.

Each check returns the violations it found, as sentences; the runner
gathers the objects (one LIST per kind per batch) and the operator's writes
(the audit log), and these functions judge them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from specdeploy.operator.observed import CHILD_KINDS, OPTIONAL_KINDS

Obj = dict[str, Any]
LISTED_KINDS = tuple(kind for kind in CHILD_KINDS if kind not in OPTIONAL_KINDS)
"""The kinds a fuzz batch lists: what the operator creates, less what a cluster may not
serve (KEDA's ScaledObjects)."""
MAX_NAME = 63
LOG_ALARMS = (
    "Traceback",
    "reconcile raised",
    "will ignore it",
    "Task exception was never retrieved",
)
GUARDED = ("serviceaccounts", "roles", "rolebindings", "jobs")
"""Shared children, joined and left by JSON patches that test the resourceVersion."""
_PATH = re.compile(r"^(spec(?:\.[A-Za-z0-9_]+|\[\d+\]|\[[^\]]*\])*)")
_STEP = re.compile(r"\.([A-Za-z0-9_]+)|\[(\d+)\]|\[([^\]]*)\]")


def condition(body: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for found in (body.get("status") or {}).get("conditions") or ():
        if found.get("type") == kind:
            return dict(found)
    return None


def observed(body: Mapping[str, Any]) -> bool:
    meta = body.get("metadata") or {}
    return (body.get("status") or {}).get("observedGeneration") == meta.get("generation")


def named_field(message: str) -> str | None:
    """The field path a validation message starts with (``spec.a.b[2]: ...``)."""
    found = _PATH.match(message)
    return found.group(1) if found and found.group(1) != "spec" else None


def field_exists(path: str, body: Mapping[str, Any]) -> bool:
    """Whether ``path``'s parent is in ``body`` (a required field may be missing itself).

    ``spec.a[1].b``: ``body["spec"]["a"][1]`` must exist; ``b`` may be absent."""
    steps = _STEP.findall(path.removeprefix("spec"))
    node: Any = body.get("spec")
    for i, (key, index, map_key) in enumerate(steps):
        last = i == len(steps) - 1
        if key:
            if not isinstance(node, Mapping):
                return False
            if last:
                return True
            if key not in node:
                return False
            node = node[key]
        elif index:
            if not isinstance(node, list) or int(index) >= len(node):
                return False
            node = node[int(index)]
        else:
            if not isinstance(node, Mapping) or (not last and map_key not in node):
                return False
            node = node.get(map_key)
    return True


def check_valid_false(body: Mapping[str, Any], sent: Mapping[str, Any]) -> list[str]:
    """``Valid=False``: its message names one field of the spec (each line: one problem)."""
    valid = condition(body, "Valid")
    if valid is None:
        return ["no Valid condition"]
    message = str(valid.get("message", ""))
    lines = [line for line in message.split("; ") if line] or [message]
    found = []
    for line in lines:
        path = named_field(line)
        if path is None:
            found.append(f"Valid=False message names no field: {line[:200]!r}")
        elif not field_exists(path, sent):
            found.append(f"Valid=False names {path}, which is not in the spec sent")
    return found


def owned_by(uid: str, children: Iterable[Obj]) -> list[str]:
    """``kind/name`` of every child with an ownerReference to ``uid``."""
    return [
        f"{c.get('kind', '?')}/{c['metadata']['name']}"
        for c in children
        if any(ref.get("uid") == uid for ref in c["metadata"].get("ownerReferences") or ())
    ]


def long_names(children: Iterable[Obj]) -> list[str]:
    return [
        f"{c.get('kind', '?')}/{c['metadata']['name']} is {len(c['metadata']['name'])} characters"
        for c in children
        if len(c["metadata"]["name"]) > MAX_NAME
    ]


def log_alarms(text: str) -> list[str]:
    """Lines of the operator's log that say work was dropped or code raised."""
    return [line[:300] for line in text.splitlines() if any(a in line for a in LOG_ALARMS)]


def refused_writes(writes: Iterable[tuple[str, str, int]]) -> list[str]:
    """Operator writes the API server refused and that stayed refused, in order of time.

    404 and 409 are races; so is a 422 on a guarded JSON patch whose ``test`` of the
    resourceVersion failed (a stale view the operator decides again on; the audit log
    cannot tell it from a refusal, so those count through ``Applied=False``). Either way a
    later write of the same object succeeds, so only a refusal with no later success
    counts; retries of one refusal are one entry, with their count."""
    last: dict[tuple[str, str], int] = {}
    writes = [
        (what, name, code)
        for what, name, code in writes
        if not (code == 422 and what.startswith("patch ") and what.split(" ")[1] in GUARDED)
    ]
    tries: dict[tuple[str, str], int] = {}
    for what, name, code in writes:
        key = (what, name)
        last[key] = code
        if 400 <= code < 500:
            tries[key] = tries.get(key, 0) + 1
    return [
        f"{what} {name} -> {code} ({tries[(what, name)]}x)"
        for (what, name), code in last.items()
        if 400 <= code < 500 and code not in (404, 409)
    ]


def retry_peak(writes: Iterable[tuple[str, str, float, int]]) -> dict[str, Any]:
    """The object whose refused writes came fastest: review §5.2 I8 asks for <= 2 a
    minute under a persistent refusal. ``writes``: (namespace/name, what, seconds, code).

    Reported, not judged: the retries of one refusal follow every event that
    reconciles the deployment, not only its backoff (found by this fuzzer)."""
    times: dict[tuple[str, str], list[float]] = {}
    for key, what, at, code in writes:
        # Events have generated names: many objects, one empty name, no retries.
        guarded = code == 422 and what.startswith("patch ") and what.split(" ")[1] in GUARDED
        if 400 <= code < 500 and code not in (404, 409) and not key.endswith("/") and not guarded:
            times.setdefault((key, what), []).append(at)
    worst: dict[str, Any] = {"object": None, "refusals": 0, "perMinute": 0.0}
    for (key, what), seen in times.items():
        span = max(seen) - min(seen)
        rate = 60.0 * (len(seen) - 1) / span if span > 0 else 0.0
        if len(seen) >= 3 and rate > worst["perMinute"]:
            worst = {"object": f"{what} {key}", "refusals": len(seen), "perMinute": round(rate, 1)}
    return worst
