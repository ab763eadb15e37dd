"""What an operator pod on a fake GPU node runs: decided from the pod alone."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from e2e.localcluster import emulation
from e2e.localcluster.emulation import Kind, Ports
from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.common import Parent
from specdeploy.operator.builders.deployment import ServingPool, serving_deployment
from specdeploy.operator.builders.job import ProfilingJob, profiling_job
from specdeploy.operator.pool.fingerprint import pool_fingerprint

H100 = "NVIDIA-H100-80GB-HBM3"
PARENT = Parent(name="chat", namespace="ml", uid="u-1")
SPEC = SpeculativeDeploymentSpec.model_validate(
    {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "maxK": 4},
    }
)


def pod_of(template: dict[str, Any], **annotations: str) -> dict[str, Any]:
    spec = template["spec"]["template"]
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "x", "annotations": annotations},
        "spec": spec["spec"],
    }


def serving_pod(**annotations: str) -> dict[str, Any]:
    pool = ServingPool("chat-h100", "chat-h100-table", H100, 1, 1, "p-1", ((1, 4, 3), (5, 8, 0)))
    return pod_of(serving_deployment(PARENT, SPEC, pool), **annotations)


def profiling_pod(spec: SpeculativeDeploymentSpec = SPEC) -> dict[str, Any]:
    fp = pool_fingerprint(spec, gpu_type=H100, gpus_per_replica=1)
    job = ProfilingJob("j", fp.profile_name(), fp, "ml", "runtime:1")
    return pod_of(profiling_job(spec, job))


def test_the_operators_pods_are_recognised_by_their_command() -> None:
    assert emulation.kind_of(serving_pod()) is Kind.SERVING
    assert emulation.kind_of(profiling_pod()) is Kind.PROFILER


def test_a_marked_pod_runs_as_it_is_and_a_foreign_pod_is_left_to_kwok() -> None:
    assert emulation.kind_of(serving_pod(**{"specdeploy.io/run-locally": "true"})) is Kind.AS_IS
    foreign = {"metadata": {}, "spec": {"containers": [{"command": ["nginx"]}]}}
    assert emulation.kind_of(foreign) is Kind.NONE
    assert emulation.kind_of({"metadata": {}, "spec": {}}) is Kind.NONE


def test_a_vllm_profiling_pod_runs_the_simulator_for_the_nodes_gpu_keyed_by_its_own_model() -> None:
    args = profiling_pod()["spec"]["containers"][0]["args"]
    assert "--backend=vllm" in args
    out = emulation.profiler_args(args, "NVIDIA-L40S")
    assert "--backend=sim" in out and "--backend=vllm" not in out
    assert "--emulate" in out
    assert [a for a in out if a.startswith("--gpu-type=")] == ["--gpu-type=NVIDIA-L40S"]
    assert "--model=meta-llama/Llama-3.1-8B-Instruct" in out  # the fingerprint's model
    assert sum(a.startswith("--preset=") for a in out) == 1


def test_a_sim_profiling_pod_is_left_as_the_spec_asked() -> None:
    spec = SpeculativeDeploymentSpec.model_validate(
        {
            **SPEC.model_dump(by_alias=True, exclude_none=True),
            "profiling": {"backend": "sim", "simPreset": "seed-dense"},
        }
    )
    args = profiling_pod(spec)["spec"]["containers"][0]["args"]
    assert emulation.profiler_args(args, H100) == args


def test_a_serving_pod_runs_the_emulated_server_with_its_args_on_its_loopback_port() -> None:
    container = serving_pod()["spec"]["containers"][0]
    argv = emulation.serving_argv(container["args"], Ports(41001, 41002))
    assert argv[:3] == [sys.executable, "-m", emulation.SERVER_MODULE]
    assert [a for a in argv if a.startswith("--port=")] == ["--port=41001"]
    assert argv[3] == SPEC.model.name
    assert any(a.startswith("--speculative-config=") for a in argv)
    env = emulation.serving_env(Ports(41001, 41002), H100)
    assert env["SPECDEPLOY_METRICS_PORT"] == "41002" and env["SPECDEPLOY_EMULATED_GPU"] == H100
    assert env["SPECDEPLOY_METRICS_ADDR"] == "127.0.0.1"


@pytest.mark.parametrize(
    ("labels", "product"), [({"nvidia.com/gpu.product": H100}, H100), ({}, ""), (None, "")]
)
def test_the_nodes_gpu_product_comes_from_its_gfd_label(
    labels: dict[str, str] | None, product: str
) -> None:
    assert emulation.gpu_product({"metadata": {"labels": labels}}) == product
