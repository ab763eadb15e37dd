"""A container's environment and command line, resolved the way the kubelet resolves them.

Pure functions of the pod and the ConfigMaps/Secrets it references (given
through ``ObjectSource``), so the rules are unit-tested without a cluster:
``envFrom`` first, then ``env`` overriding it; literal values with ``$(VAR)``
expansion over earlier variables (``$$`` escapes); ``valueFrom`` for
ConfigMap and Secret keys and the common ``fieldRef`` paths.

Paths: a local process cannot see files at the pod's mount paths, so every
mount path is mapped to a local directory and occurrences of a mount path in
the command line, the working directory and env values are rewritten to it
(longest mount path first, on path boundaries). ``mounts_env`` exposes the
mapping as JSON for programs that build paths at run time.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

Obj = dict[str, Any]

MOUNTS_ENV = "SPECDEPLOY_LOCAL_MOUNTS"


class PodConfigError(ValueError):
    """The pod cannot be run as given (missing key, unsupported field); names what."""


class ObjectSource(Protocol):
    """Read access to the objects a pod's env and volumes reference."""

    def config_map(self, namespace: str, name: str) -> Obj | None: ...

    def secret(self, namespace: str, name: str) -> Obj | None: ...


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A downward-API ``fieldRef.fieldPath`` of the pod."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if keyed:
        return str(meta.get(keyed.group(1), {}).get(keyed.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1], {})
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise PodConfigError(f"fieldRef {path!r} is not supported by the kubelet stand-in")


def object_data(kind: str, obj: Obj | None) -> dict[str, str]:
    if obj is None:
        return {}
    if kind == "secret":
        return {k: base64.b64decode(v).decode() for k, v in obj.get("data", {}).items()}
    return dict(obj.get("data", {}))


def _fetch(source: ObjectSource, kind: str, namespace: str, name: str) -> Obj | None:
    if kind == "secret":
        return source.secret(namespace, name)
    return source.config_map(namespace, name)


def _key_ref(ref: Mapping[str, Any], kind: str, namespace: str, source: ObjectSource) -> str | None:
    obj = _fetch(source, kind, namespace, ref["name"])
    data = object_data(kind, obj)
    if ref["key"] in data:
        return data[ref["key"]]
    if ref.get("optional"):
        return None
    what = "missing" if obj is None else f"has no key {ref['key']!r}"
    raise PodConfigError(f"{kind} {namespace}/{ref['name']} {what}")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known names expand, unknown stay, $$ escapes."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


def _env_from(container: Mapping[str, Any], namespace: str, source: ObjectSource) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container.get("envFrom", []):
        kind = "secret" if "secretRef" in entry else "configMap"
        ref = entry.get("secretRef") or entry["configMapRef"]
        obj = _fetch(source, kind, namespace, ref["name"])
        if obj is None and not ref.get("optional"):
            raise PodConfigError(f"{kind} {namespace}/{ref['name']} missing (envFrom)")
        prefix = entry.get("prefix", "")
        env.update({prefix + k: v for k, v in object_data(kind, obj).items()})
    return env


def resolve_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], source: ObjectSource
) -> dict[str, str]:
    """The container's environment as the kubelet would set it (service links aside)."""
    namespace = pod["metadata"]["namespace"]
    env = _env_from(container, namespace, source)
    for var in container.get("env", []):
        value: str | None
        if "valueFrom" not in var:
            value = expand(var.get("value", ""), env)
        else:
            ref = var["valueFrom"]
            if "configMapKeyRef" in ref:
                value = _key_ref(ref["configMapKeyRef"], "configMap", namespace, source)
            elif "secretKeyRef" in ref:
                value = _key_ref(ref["secretKeyRef"], "secret", namespace, source)
            elif "fieldRef" in ref:
                value = field_value(pod, ref["fieldRef"]["fieldPath"])
            else:
                raise PodConfigError(f"env {var['name']}: {sorted(ref)} not supported")
        if value is not None:
            env[var["name"]] = value
    return env


def rewrite_paths(value: str, mounts: Mapping[str, str]) -> str:
    """Replace mount paths in ``value`` by their local paths, on path boundaries, in one pass."""
    table = {mount.rstrip("/"): local for mount, local in mounts.items() if mount.rstrip("/")}
    if not table:
        return value
    alternatives = "|".join(re.escape(m) for m in sorted(table, key=len, reverse=True))
    pattern = rf"(?<![\w.-])({alternatives})(?=/|$|[\s:;,='\"])"
    return re.sub(pattern, lambda match: table[match.group(1)], value)


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with $(VAR) expansion; the image's entrypoint is unknown locally."""
    command = container.get("command")
    if not command:
        raise PodConfigError(
            f"container {container['name']!r} has no command: the stand-in cannot know the "
            "image's entrypoint, so pods it runs must set one"
        )
    return [expand(part, env) for part in [*command, *container.get("args", [])]]


def mounts_env(mounts: Mapping[str, str]) -> dict[str, str]:
    return {MOUNTS_ENV: json.dumps(dict(mounts), sort_keys=True)}
