"""The operator's serving pod, fed to the add-on: ConfigMap -> table loader, env -> settings.

What the operator emits is taken from its real decision (``decide``, on a
deployment whose pool has a stored profile) and handed, unchanged, to the
add-on's own readers: a rename on either side of ``specdeploy.runtime.contract``
that the other side does not follow fails here, with no vLLM and no cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.deployment import METRICS_PORT, TABLE_DIR
from specdeploy.operator.decision.decide import decide
from specdeploy.operator.observed import Observed
from specdeploy.operator.pool.fingerprint import pool_fingerprint
from specdeploy.runtime.contract import (
    PROFILE_FILE,
    SCHEDULER_CLS,
    TABLE_FILE,
    PodEnv,
    PoolTable,
)
from specdeploy.runtime.policy.adaptive import AdaptivePolicy
from specdeploy.runtime.policy.static import FixedPolicy, TablePolicy
from specdeploy.runtime.vllm_addon.settings import AddonSettings
from specdeploy.runtime.vllm_addon.table_source import EngineShape, load_table
from tests.paths import EXAMPLES

H100 = "NVIDIA-H100-80GB-HBM3"
NODES = (
    {
        "metadata": {"name": "h1", "labels": {"nvidia.com/gpu.product": H100}},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    },
)


def deployment(policy: str, **speculation: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / "specdeploy.yaml").read_text())
    body["spec"]["speculation"] = {**body["spec"]["speculation"], "policy": policy, **speculation}
    body["spec"].pop("pools", None)  # one pool per GPU type found: H100 here
    body["metadata"].update({"namespace": "inference", "uid": "uid-1", "generation": 1})
    return body


def stored_profile(body: Mapping[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "profile-example.yaml").read_text())
    spec = SpeculativeDeploymentSpec.model_validate(body["spec"])
    fp = pool_fingerprint(spec, gpu_type=H100, gpus_per_replica=1)
    doc["spec"]["fingerprint"] = fp.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["metadata"] = {"name": fp.profile_name(), "namespace": "inference"}
    return doc


def emitted(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (ConfigMap, Deployment) the operator's decision wants for the H100 pool."""
    profiles = {p["metadata"]["name"]: p for p in [stored_profile(body)]}
    decision = decide(
        copy.deepcopy(body), Observed(nodes=NODES, profiles=profiles), now="2026-01-01T00:00:00Z"
    )
    by_kind = {m["kind"]: m for m in decision.owned if m["kind"] in ("ConfigMap", "Deployment")}
    assert set(by_kind) == {"ConfigMap", "Deployment"}, decision.status
    return by_kind["ConfigMap"], by_kind["Deployment"]


def container(deployment_manifest: Mapping[str, Any]) -> dict[str, Any]:
    pod = deployment_manifest["spec"]["template"]["spec"]
    found: dict[str, Any] = pod["containers"][0]
    return found


def pod_env(deployment_manifest: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(deployment_manifest)["env"] if "value" in e}


def engine_shape(deployment_manifest: Mapping[str, Any], max_batch_size: int = 256) -> EngineShape:
    """What vLLM fixes at start from the container's ``--speculative-config`` (none: K=0)."""
    args = container(deployment_manifest)["args"]
    found = [a.split("=", 1)[1] for a in args if a.startswith("--speculative-config=")]
    if not found:
        return EngineShape(0, max_batch_size, allowed_k=(0,))
    config = yaml.safe_load(found[0])
    ks = tuple(sorted({k for _, _, k in config["num_speculative_tokens_per_batch_size"]}))
    return EngineShape(config["num_speculative_tokens"], max_batch_size, allowed_k=ks)


@pytest.mark.parametrize(
    ("policy", "extra", "built"),
    [
        ("adaptive", {}, AdaptivePolicy),
        ("table", {}, TablePolicy),
        ("fixed", {"fixedK": 2}, FixedPolicy),
    ],
)
def test_the_configmap_the_operator_writes_is_a_table_the_addon_loads(
    policy: str, extra: dict[str, Any], built: type
) -> None:
    configmap, serving = emitted(deployment(policy, **extra))
    data = configmap["data"]
    assert TABLE_FILE in data
    settings = AddonSettings.from_env(pod_env(serving))
    loaded = load_table(
        data[TABLE_FILE].encode(),
        data[PROFILE_FILE].encode() if PROFILE_FILE in data else None,
        engine_shape(serving),
        default_policy=settings.policy,
        adaptive=settings.adaptive,
    )
    assert loaded.policy_kind == policy
    assert isinstance(loaded.policy, built)
    if policy in ("adaptive", "table"):
        assert PROFILE_FILE in data
        assert loaded.profile_name.startswith("p-")


def test_policy_off_runs_plain_vllm_without_the_addon() -> None:
    """No speculative config, no scheduler class: the table is never loaded, vLLM is vanilla."""
    configmap, serving = emitted(deployment("off"))
    args = container(serving)["args"]
    assert not [a for a in args if a.startswith(("--speculative-config", "--scheduler-cls"))]
    assert PoolTable.from_json(configmap["data"][TABLE_FILE]).policy == "off"


def test_the_env_the_operator_sets_is_what_the_addon_reads() -> None:
    configmap, serving = emitted(deployment("adaptive"))
    env = pod_env(serving)
    specdeploy_vars = {name for name in env if name.startswith("SPECDEPLOY_")}
    assert specdeploy_vars <= {v.value for v in PodEnv}, "a variable the add-on never reads"
    settings = AddonSettings.from_env(env)
    assert settings.policy == "adaptive"
    assert settings.metrics_port == METRICS_PORT
    assert settings.pool == H100
    table = PoolTable.from_json(configmap["data"][TABLE_FILE])
    assert table.profile is not None and settings.profile == table.profile
    # The table file is the mounted ConfigMap's table key; the profile sits beside it.
    assert settings.table_file is not None and settings.profile_path is not None
    assert PurePosixPath(settings.table_file) == PurePosixPath(TABLE_DIR) / TABLE_FILE
    assert settings.profile_path.name == PROFILE_FILE
    mounts = {m["name"]: m["mountPath"] for m in container(serving)["volumeMounts"]}
    volumes = serving["spec"]["template"]["spec"]["volumes"]
    table_volume = next(
        v for v in volumes if v.get("configMap", {}).get("name") == configmap["metadata"]["name"]
    )
    assert mounts[table_volume["name"]] == TABLE_DIR


def test_the_scheduler_class_the_operator_passes_is_the_addons_factory() -> None:
    _, serving = emitted(deployment("adaptive"))
    args = container(serving)["args"]
    assert f"--scheduler-cls={SCHEDULER_CLS}" in args
    module, _, name = SCHEDULER_CLS.rpartition(".")
    factory = getattr(__import__(module, fromlist=[name]), name)
    assert callable(factory)
