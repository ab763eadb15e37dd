"""The operator's profiling Job, fed to the profiler: its args to ``specdeploy profile``,
its exit codes back to the Job's ``podFailurePolicy``.

The Job comes from the operator's builder for the example deployment; the
profiler side is the real CLI parser and checks, and the real exit codes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.cli import profile as command
from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.job import ProfilingJob, profiling_job
from specdeploy.operator.pool.fingerprint import pool_fingerprint
from specdeploy.runtime.profiler.exit_codes import ExitCode, failure
from specdeploy.runtime.profiler.job_contract import (
    ENV_NAME,
    ENV_NAMESPACE,
    ENV_SA_DIR,
    PROFILER_CONTAINER,
)
from specdeploy.runtime.profiler.run import check_options, plan_writers
from specdeploy.runtime.profiler.writer import ApiWriter
from tests.paths import EXAMPLES

H100 = "NVIDIA-H100-80GB-HBM3"


def job(backend: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / "specdeploy.yaml").read_text())["spec"]
    data["profiling"] = {**data.get("profiling", {}), "backend": backend}
    spec = SpeculativeDeploymentSpec.model_validate(data)
    fp = pool_fingerprint(spec, gpu_type=H100, gpus_per_replica=2)
    return profiling_job(spec, ProfilingJob("job-x", fp.profile_name(), fp, "inference", "img:1"))


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = manifest["spec"]["template"]["spec"]["containers"][0]
    assert found["name"] == PROFILER_CONTAINER
    return found


@pytest.mark.parametrize("backend", ["sim", "vllm"])
def test_the_profile_command_accepts_the_jobs_arguments(backend: str) -> None:
    """The profiler's own parser and checks take exactly what the Job passes."""
    manifest = job(backend)
    run = container(manifest)
    assert run["command"] == ["specdeploy"]
    parser = argparse.ArgumentParser(prog="specdeploy")
    command.register(parser.add_subparsers(dest="command"))
    options = command.options_from(parser.parse_args(run["args"]))
    check_options(options)
    assert options.backend == backend
    assert options.output.kubernetes is True
    assert options.max_k == 5


def test_the_job_names_the_profile_and_its_namespace_as_the_profiler_reads_them() -> None:
    manifest = job("sim")
    env = {e["name"]: e for e in container(manifest)["env"]}
    profile = manifest["metadata"]["labels"]["specdeploy.io/profile"]
    assert env[ENV_NAME]["value"] == profile
    assert env[ENV_NAMESPACE]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env[ENV_SA_DIR]["value"] == "/var/run/secrets/kubernetes.io/serviceaccount"


def test_in_the_jobs_pod_the_profiler_writes_to_the_jobs_namespace(tmp_path: Path) -> None:
    """The Job's env, resolved as a kubelet resolves it, gives the profiler its API writer."""
    manifest = job("sim")
    run = container(manifest)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("t0ken\n")
    (sa / "namespace").write_text("inference")
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        **{e["name"]: e["value"] for e in run["env"] if "value" in e},
        ENV_NAMESPACE: manifest["metadata"]["namespace"],  # the downward API's answer
        ENV_SA_DIR: str(sa),  # where a stand-in kubelet puts the mount, as it rewrites env
    }
    parser = argparse.ArgumentParser(prog="specdeploy")
    command.register(parser.add_subparsers(dest="command"))
    options = command.options_from(parser.parse_args(run["args"]))
    (writer,) = plan_writers(options.output, env)
    assert isinstance(writer, ApiWriter)
    assert writer.namespace == manifest["metadata"]["namespace"] == "inference"


def test_the_job_fails_fast_on_exactly_the_profilers_deterministic_exit_codes() -> None:
    rules = job("vllm")["spec"]["podFailurePolicy"]["rules"]
    fail = next(r for r in rules if r["action"] == "FailJob")["onExitCodes"]
    assert fail["containerName"] == PROFILER_CONTAINER
    deterministic = set(fail["values"])
    for code in ExitCode:
        if code in (ExitCode.OK, ExitCode.TRANSIENT):
            assert code not in deterministic, f"{code.name} would never be retried"
        else:
            assert failure(code, "x").exit_code in deterministic, f"{code.name} would be retried"
