"""A pod's volumes written to a local directory, as the kubelet would mount them.

Supported: configMap, secret, downwardAPI, emptyDir and projected volumes
(serviceAccountToken, configMap, secret, downwardAPI sources) - which covers
the ServiceAccount volume the admission plugin adds to every pod
(``kube-api-access-*``: a bound token, ``ca.crt`` from ``kube-root-ca.crt``,
the namespace). The token comes from the TokenRequest API bound to the pod,
so what the local process does with it is subject to RBAC and the token dies
with the pod. Other volume types make the pod fail with a message naming them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from e2e.localcluster.podenv import ObjectSource, PodConfigError, field_value, object_data

Obj = dict[str, Any]


class TokenSource(Protocol):
    """Issues ServiceAccount tokens bound to a pod (TokenRequest)."""

    def pod_token(self, pod: Mapping[str, Any], audience: str | None, seconds: int) -> str: ...


def _write(directory: Path, relative: str, content: str, mode: int | None) -> None:
    target = directory / relative
    if not target.resolve().is_relative_to(directory.resolve()):
        raise PodConfigError(f"volume item path {relative!r} escapes its volume")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    if mode is not None:
        target.chmod(mode & 0o777)


def _key_files(
    directory: Path, data: Mapping[str, str], items: list[Obj] | None, mode: int | None
) -> None:
    if items is None:
        for key, value in data.items():
            _write(directory, key, value, mode)
        return
    for item in items:
        if item["key"] not in data:
            raise PodConfigError(f"volume item key {item['key']!r} not found")
        _write(directory, item["path"], data[item["key"]], item.get("mode", mode))


def _object_volume(
    directory: Path, kind: str, ref: Mapping[str, Any], namespace: str, source: ObjectSource
) -> None:
    name = ref["secretName"] if kind == "secret" else ref["name"]
    obj = source.secret(namespace, name) if kind == "secret" else source.config_map(namespace, name)
    if obj is None and not ref.get("optional"):
        raise PodConfigError(f"{kind} {namespace}/{name} missing (volume)")
    _key_files(directory, object_data(kind, obj), ref.get("items"), ref.get("defaultMode"))


def _downward(directory: Path, pod: Mapping[str, Any], items: list[Obj]) -> None:
    for item in items:
        if "fieldRef" not in item:
            raise PodConfigError("downwardAPI resourceFieldRef is not supported by the stand-in")
        _write(directory, item["path"], field_value(pod, item["fieldRef"]["fieldPath"]), None)


def _projected(
    directory: Path,
    pod: Mapping[str, Any],
    spec: Mapping[str, Any],
    source: ObjectSource,
    tokens: TokenSource,
) -> None:
    namespace = pod["metadata"]["namespace"]
    for part in spec.get("sources", []):
        if "serviceAccountToken" in part:
            sat = part["serviceAccountToken"]
            token = tokens.pod_token(pod, sat.get("audience"), sat.get("expirationSeconds", 3600))
            _write(directory, sat["path"], token, 0o600)
        elif "configMap" in part:
            _object_volume(directory, "configMap", part["configMap"], namespace, source)
        elif "secret" in part:
            ref = {**part["secret"], "secretName": part["secret"]["name"]}
            _object_volume(directory, "secret", ref, namespace, source)
        elif "downwardAPI" in part:
            _downward(directory, pod, part["downwardAPI"].get("items", []))
        else:
            raise PodConfigError(f"projected source {sorted(part)} not supported by the stand-in")


def materialize_volume(
    directory: Path,
    pod: Mapping[str, Any],
    volume: Mapping[str, Any],
    source: ObjectSource,
    tokens: TokenSource,
) -> None:
    """Write one volume's files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    namespace = pod["metadata"]["namespace"]
    if "configMap" in volume:
        _object_volume(directory, "configMap", volume["configMap"], namespace, source)
    elif "secret" in volume:
        _object_volume(directory, "secret", volume["secret"], namespace, source)
    elif "projected" in volume:
        _projected(directory, pod, volume["projected"], source, tokens)
    elif "downwardAPI" in volume:
        _downward(directory, pod, volume["downwardAPI"].get("items", []))
    elif "emptyDir" not in volume:
        kinds = sorted(set(volume) - {"name"})
        raise PodConfigError(f"volume {volume['name']!r}: {kinds} not supported by the stand-in")


def materialize_mounts(
    root: Path,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    source: ObjectSource,
    tokens: TokenSource,
) -> dict[str, str]:
    """Write the volumes ``container`` mounts under ``root``; return mountPath -> local path."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    mounts: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            raise PodConfigError(f"volumeMount {mount['name']!r} names no volume")
        directory = root / "volumes" / mount["name"]
        if not directory.exists():
            materialize_volume(directory, pod, volumes[mount["name"]], source, tokens)
        local = directory / mount["subPath"] if mount.get("subPath") else directory
        mounts[mount["mountPath"]] = str(local)
    return mounts
