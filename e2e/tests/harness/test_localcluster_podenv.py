"""A container's env, command line and paths resolve as the kubelet resolves them."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from e2e.localcluster.podenv import (
    PodConfigError,
    command_line,
    expand,
    resolve_env,
    rewrite_paths,
)

Obj = dict[str, Any]


class Objects:
    """An ObjectSource over literal dicts."""

    def __init__(self, config_maps: dict[str, Obj], secrets: dict[str, Obj]) -> None:
        self.config_maps, self.secrets = config_maps, secrets

    def config_map(self, namespace: str, name: str) -> Obj | None:
        return self.config_maps.get(name)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.secrets.get(name)


SOURCE = Objects(
    {"cm": {"data": {"A": "from-cm", "B": "b"}}},
    {"sec": {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()}}},
)
POD: Obj = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
    "spec": {"nodeName": "gpu-h100-0", "serviceAccountName": "sa"},
    "status": {"podIP": "10.244.0.5"},
}


def test_env_overrides_env_from_and_expands_earlier_variables() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "CM_A", "value": "literal"},
            {"name": "GREETING", "value": "$(CM_B)-$(UNKNOWN)-$$(CM_B)"},
        ],
    }

    env = resolve_env(POD, container, SOURCE)

    assert env == {"CM_A": "literal", "CM_B": "b", "GREETING": "b-$(UNKNOWN)-$(CM_B)"}


def test_value_from_reads_configmaps_secrets_and_pod_fields() -> None:
    container = {
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "A"}}},
            {"name": "T", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
    }

    env = resolve_env(POD, container, SOURCE)

    assert env == {"A": "from-cm", "T": "s3cret", "N": "gpu-h100-0", "L": "x", "IP": "10.244.0.5"}


def test_an_optional_missing_key_is_skipped_and_a_required_one_fails() -> None:
    optional = {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": True}}
    required = {"configMapKeyRef": {"name": "absent", "key": "A"}}

    assert resolve_env(POD, {"env": [{"name": "X", "valueFrom": optional}]}, SOURCE) == {}
    with pytest.raises(PodConfigError, match="absent"):
        resolve_env(POD, {"env": [{"name": "X", "valueFrom": required}]}, SOURCE)


def test_mount_paths_are_rewritten_on_path_boundaries_longest_first() -> None:
    mounts = {"/etc/cfg": "/tmp/pod/cfg", "/etc/cfg/deep": "/tmp/pod/deep", "/data": "/tmp/d"}

    assert rewrite_paths("--table=/etc/cfg/t.json", mounts) == "--table=/tmp/pod/cfg/t.json"
    assert rewrite_paths("/etc/cfg/deep/x", mounts) == "/tmp/pod/deep/x"
    assert rewrite_paths("/etc/cfgx /database /x/data", mounts) == "/etc/cfgx /database /x/data"
    assert rewrite_paths("/data:/etc/cfg", mounts) == "/tmp/d:/tmp/pod/cfg"


def test_the_command_line_is_command_then_args_expanded() -> None:
    container = {"name": "c", "command": ["run", "$(MODE)"], "args": ["--x=$(MODE)"]}

    assert command_line(container, {"MODE": "fast"}) == ["run", "fast", "--x=fast"]
    assert expand("$(MODE)", {}) == "$(MODE)"


def test_a_container_without_a_command_is_refused_with_the_reason() -> None:
    with pytest.raises(PodConfigError, match="entrypoint"):
        command_line({"name": "c", "image": "x"}, {})
