"""A pod's volumes are written locally the way the kubelet would mount them."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster.podenv import PodConfigError
from e2e.localcluster.volumes import materialize_mounts

Obj = dict[str, Any]


class Cluster:
    """ObjectSource and TokenSource over literals; records token requests."""

    def __init__(self) -> None:
        self.tokens: list[tuple[str | None, int]] = []

    def config_map(self, namespace: str, name: str) -> Obj | None:
        maps = {
            "table": {"data": {"table.json": "{}", "other": "x"}},
            "kube-root-ca.crt": {"data": {"ca.crt": "PEM"}},
        }
        return maps.get(name)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return {"data": {"key": base64.b64encode(b"hidden").decode()}} if name == "s" else None

    def pod_token(self, pod: Mapping[str, Any], audience: str | None, seconds: int) -> str:
        self.tokens.append((audience, seconds))
        return f"jwt-for-{pod['metadata']['name']}"


SA_VOLUME: Obj = {
    "name": "kube-api-access",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ]
    },
}


def _pod(volumes: list[Obj]) -> Obj:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"volumes": volumes}}


def test_configmap_items_secrets_and_subpaths_land_where_the_mounts_say(tmp_path: Path) -> None:
    pod = _pod(
        [
            {
                "name": "t",
                "configMap": {"name": "table", "items": [{"key": "table.json", "path": "k.json"}]},
            },
            {"name": "s", "secret": {"secretName": "s"}},
        ]
    )
    container = {
        "volumeMounts": [
            {"name": "t", "mountPath": "/etc/table"},
            {"name": "s", "mountPath": "/etc/key", "subPath": "key"},
        ]
    }

    mounts = materialize_mounts(tmp_path, pod, container, Cluster(), Cluster())

    assert Path(mounts["/etc/table"], "k.json").read_text() == "{}"
    assert not Path(mounts["/etc/table"], "other").exists()
    assert Path(mounts["/etc/key"]).read_text() == "hidden"


def test_the_service_account_volume_has_a_bound_token_the_ca_and_the_namespace(
    tmp_path: Path,
) -> None:
    cluster = Cluster()
    mount = "/var/run/secrets/kubernetes.io/serviceaccount"
    container = {"volumeMounts": [{"name": "kube-api-access", "mountPath": mount}]}

    mounts = materialize_mounts(tmp_path, _pod([SA_VOLUME]), container, cluster, cluster)
    sa_dir = Path(mounts[mount])

    assert (sa_dir / "token").read_text() == "jwt-for-p"
    assert (sa_dir / "ca.crt").read_text() == "PEM"
    assert (sa_dir / "namespace").read_text() == "ns"
    assert cluster.tokens == [(None, 3607)]


@pytest.mark.parametrize(
    "volume",
    [
        pytest.param({"name": "v", "hostPath": {"path": "/"}}, id="unsupported type"),
        pytest.param({"name": "v", "configMap": {"name": "absent"}}, id="missing configmap"),
        pytest.param(
            {
                "name": "v",
                "configMap": {"name": "table", "items": [{"key": "table.json", "path": "../x"}]},
            },
            id="item path escaping the volume",
        ),
    ],
)
def test_a_volume_the_stand_in_cannot_honour_is_refused(tmp_path: Path, volume: Obj) -> None:
    container = {"volumeMounts": [{"name": "v", "mountPath": "/v"}]}

    with pytest.raises(PodConfigError):
        materialize_mounts(tmp_path, _pod([volume]), container, Cluster(), Cluster())


def test_a_configmap_volume_is_swapped_whole_when_the_configmap_changes(tmp_path: Path) -> None:
    """As the kubelet's atomic writer: names link through ..data, which moves in one step."""
    from e2e.localcluster.volumes import DATA_LINK, refresh_object_volume

    class Source:
        def __init__(self) -> None:
            self.data = {"table.json": "v1", "profile.json": "p1"}

        def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
            return {"data": dict(self.data)}

        def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
            return None

    source = Source()
    pod = {"metadata": {"namespace": "ns"}}
    volume = {"name": "table", "configMap": {"name": "t"}}
    directory = tmp_path / "table"
    first = refresh_object_volume(directory, pod, volume, source, None)
    assert (directory / "table.json").read_text() == "v1"
    assert (directory / "table.json").is_symlink() and (directory / DATA_LINK).is_symlink()
    before = (directory / DATA_LINK).resolve()
    assert refresh_object_volume(directory, pod, volume, source, None) == first  # recorded
    assert (directory / DATA_LINK).resolve() == before, "unchanged data is not re-written"
    source.data = {"table.json": "v2"}
    second = refresh_object_volume(directory, pod, volume, source, first)
    assert second != first
    assert (directory / "table.json").read_text() == "v2"
    assert not (directory / "profile.json").exists(), "a removed key disappears"
    assert not before.exists(), "the old version is cleaned up"
