"""Torch-only cases (``tests/model/torch/``) run by the vLLM venv's own pytest.

torch lives only in vLLM's CPU venv, so the project's pytest cannot import
it; rather than skipping, this runs those files there and fails unless every
case in them ran and passed.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.paths import ROOT

# Engine boots and model loads: about a minute each on an AVX-512 BF16 CPU, several on
# one without it (CONTRIBUTING.md, "Tests"); the module's first test also pays for them.
pytestmark = pytest.mark.timeout(900)

CASES = sorted((ROOT / "tests" / "model" / "torch").glob("*.py"))


@pytest.mark.parametrize("cases", CASES, ids=lambda p: p.name)
def test_every_torch_case_passes_in_the_vllm_venv(
    cases: Path, vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [str(vllm_python), "-m", "pytest", str(cases), "-q", "-p", "no:cacheprovider",
         f"--junitxml={report}", f"--rootdir={ROOT}"],
        env=vllm_env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    defined = cases.read_text().count("\ndef test_")
    assert counts == {"tests": defined, "failures": 0, "errors": 0, "skipped": 0}
