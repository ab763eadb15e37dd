"""A pod's volumes written to a local directory, as the kubelet would mount them.

Supported: configMap, secret, downwardAPI, emptyDir and projected volumes
(serviceAccountToken, configMap, secret, downwardAPI sources) - which covers
the ServiceAccount volume the admission plugin adds to every pod
(``kube-api-access-*``: a bound token, ``ca.crt`` from ``kube-root-ca.crt``,
the namespace). The token comes from the TokenRequest API bound to the pod,
so what the local process does with it is subject to RBAC and the token dies
with the pod. Other volume types make the pod fail with a message naming them.

ConfigMap and Secret volumes are written the way the kubelet's atomic writer
does it: the files go into a fresh ``..<timestamp>`` directory, ``..data``
is switched to it in one rename, and each top-level name is a link through
``..data``. ``refresh_object_volume`` re-writes such a volume when its object
changed, so a running process sees every key of the new version at once (a
mounted ConfigMap updates without a restart, which the add-on's table
reload relies on); a ``subPath`` mount is never updated, as in Kubernetes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
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


DATA_LINK = "..data"
DIGEST_FILE = "..digest"
"""The data digest of the version in ``..data`` (a ``..`` name, like the kubelet's own)."""


def write_atomically(directory: Path, fill: Callable[[Path], None]) -> None:
    """``fill`` a fresh ``..<stamp>`` directory, switch ``..data`` to it, link the names.

    Names the new version lacks lose their link, and the previous version's
    directory is removed after the switch (a reader that opened a file keeps it).
    """
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{uuid.uuid4().hex[:8]}"
    stamp.mkdir()
    fill(stamp)
    data = directory / DATA_LINK
    previous = os.readlink(data) if data.is_symlink() else None
    staged = directory / "..data_tmp"
    staged.unlink(missing_ok=True)
    staged.symlink_to(stamp.name)
    os.replace(staged, data)
    names = {entry.name for entry in stamp.iterdir()}
    for name in names:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"{DATA_LINK}/{name}")
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in names:
            entry.unlink()
    if previous is not None and previous != stamp.name:
        shutil.rmtree(directory / previous, ignore_errors=True)


def _object_ref(kind: str, ref: Mapping[str, Any]) -> str:
    return str(ref["secretName"] if kind == "secret" else ref["name"])


def _fetch_object(
    kind: str, ref: Mapping[str, Any], namespace: str, source: ObjectSource
) -> Obj | None:
    name = _object_ref(kind, ref)
    obj = source.secret(namespace, name) if kind == "secret" else source.config_map(namespace, name)
    if obj is None and not ref.get("optional"):
        raise PodConfigError(f"{kind} {namespace}/{name} missing (volume)")
    return obj


def data_digest(kind: str, obj: Obj | None) -> str:
    """What a volume's content depends on: the object's data (empty when absent)."""
    blob = json.dumps(object_data(kind, obj), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _object_volume(
    directory: Path, kind: str, ref: Mapping[str, Any], namespace: str, source: ObjectSource
) -> None:
    obj = _fetch_object(kind, ref, namespace, source)
    _key_files(directory, object_data(kind, obj), ref.get("items"), ref.get("defaultMode"))


def object_volume_kind(volume: Mapping[str, Any]) -> str | None:
    """ "configMap" or "secret" for a volume the kubelet keeps in sync, else None."""
    for kind in ("configMap", "secret"):
        if kind in volume:
            return kind
    return None


def refresh_object_volume(
    directory: Path,
    pod: Mapping[str, Any],
    volume: Mapping[str, Any],
    source: ObjectSource,
    last_digest: str | None,
) -> str:
    """Re-write a ConfigMap or Secret volume when its object changed; its digest now.

    ``last_digest`` None: the digest recorded in the volume (``DIGEST_FILE``), if any.
    """
    kind = object_volume_kind(volume)
    if kind is None:
        raise ValueError(f"volume {volume.get('name')!r} is not a configMap or secret volume")
    ref = volume[kind]
    namespace = pod["metadata"]["namespace"]
    obj = _fetch_object(kind, ref, namespace, source)
    digest = data_digest(kind, obj)
    recorded = directory / DIGEST_FILE
    if last_digest is None and recorded.is_file():
        last_digest = recorded.read_text().strip()
    if digest != last_digest:
        data = object_data(kind, obj)
        write_atomically(
            directory,
            lambda stamp: _key_files(stamp, data, ref.get("items"), ref.get("defaultMode")),
        )
        recorded.write_text(digest)
    return digest


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
    if object_volume_kind(volume) is not None:
        refresh_object_volume(directory, pod, volume, source, None)
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
