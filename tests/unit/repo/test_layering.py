"""The layering contracts of ``.importlinter``, and proof that each one can break.

import-linter follows chains of imports (lazy ones inside functions too), so
a pure operator module that reaches an HTTP client through three runtime
modules breaks the contract as surely as a direct import. The checkout must
keep every contract; a copy of it with one forbidden import added, directly
or at the end of a chain, must break the contract that forbids it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
SOURCE_ROOTS = ("specdeploy", "operator", "runtime", "e2e")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(root / r) for r in ("", "operator", "runtime")),
    }
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / ".importlinter")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_checkout_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _copy(tmp_path: Path) -> Path:
    for name in SOURCE_ROOTS:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        pytest.param(
            "runtime/specdeploy/runtime/goodput.py",
            "import specdeploy.operator.api",
            "The runtime never imports the operator",
            id="runtime-imports-the-operator",
        ),
        pytest.param(
            "runtime/specdeploy/runtime/schedule.py",
            "def later() -> None:\n    import specdeploy.runtime.profiler.run",
            "The operator's decisions reach no I/O",
            id="a-pure-operator-module-reaches-the-profiler-run-through-a-lazy-import-in-a-chain",
        ),
        pytest.param(
            "operator/specdeploy/operator/builders/job.py",
            "import http.client",
            "The operator's decisions reach no I/O",
            id="a-builder-imports-http",
        ),
        pytest.param(
            "operator/specdeploy/operator/decision/decide.py",
            "from specdeploy.operator.reactor import reconcile",
            "The operator's layers",
            id="decide-imports-the-layer-above",
        ),
        pytest.param(
            "operator/specdeploy/operator/pool/table.py",
            "from specdeploy.operator.pool import scaling",
            "One pool's decision runs one way",
            id="the-table-stage-calls-a-later-stage",
        ),
        pytest.param(
            "operator/specdeploy/operator/pool/jobs.py",
            "def later() -> None:\n    from specdeploy.operator.pool.children import pool_children",
            "One pool's decision runs one way",
            id="the-jobs-helper-reaches-the-children-stage-lazily",
        ),
        pytest.param(
            "operator/specdeploy/operator/pool/outcome.py",
            "from specdeploy.operator.decision import decide",
            "The operator's layers",
            id="a-pool-stage-imports-the-deployments-decision",
        ),
        pytest.param(
            "runtime/specdeploy/runtime/ranges.py",
            "def later() -> None:\n    import specdeploy.runtime.schedule",
            "No import cycle among the modules",
            id="the-ranges-reach-back-to-the-schedule-that-imports-them",
        ),
        pytest.param(
            "runtime/specdeploy/runtime/profiler/vllm_baseline.py",
            "def later() -> None:\n    from specdeploy.runtime.profiler import vllm_backend",
            "No import cycle among the modules",
            id="the-baseline-child-imports-the-backend-that-starts-it",
        ),
        pytest.param(
            "runtime/specdeploy/runtime/vllm_addon/metrics.py",
            "import matplotlib",
            "The vLLM add-on (inside vLLM's engine core) loads no",
            id="the-addon-imports-matplotlib",
        ),
        pytest.param(
            "operator/specdeploy/operator/reactor/handlers.py",
            "import e2e.localcluster",
            "The shipped packages never import the harness",
            id="the-operator-imports-the-harness",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    root = _copy(tmp_path)
    with (root / module).open("a", encoding="utf-8") as source:
        source.write(f"\n\n{line}\n")
    done = lint_imports(root)
    assert done.returncode != 0, done.stdout[-3000:]
    assert verdict(done.stdout, broken) == "BROKEN", done.stdout[-3000:]


def verdict(report: str, contract: str) -> str:
    """KEPT or BROKEN, as the report's summary says for the contract whose name starts so."""
    words = " ".join(report.split())
    after = words[words.index(contract) :]
    return min(("KEPT", "BROKEN"), key=lambda v: after.find(f" {v}") % (len(after) + 1))
