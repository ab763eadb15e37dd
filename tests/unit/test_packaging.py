"""The distribution maps every source folder and never shadows the stdlib."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _package_dirs() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs: dict[str, str] = config["package-dir"]
    assert sorted(dirs) == sorted(config["packages"]), "package-dir and packages disagree"
    return dirs


def test_every_python_folder_is_a_listed_package() -> None:
    dirs = _package_dirs()
    mapped = {(ROOT / d).resolve() for d in dirs.values()}
    for source in ("operator", "runtime", "specdeploy"):
        for py in (ROOT / source).rglob("*.py"):
            assert py.parent.resolve() in mapped, f"{py.parent} is not in pyproject's packages"


def test_stdlib_operator_is_not_shadowed_from_the_repository_root() -> None:
    for flags in ([], ["-m", "this"]):
        code = "import operator; operator.itemgetter" if not flags else None
        cmd = [sys.executable, "-c", code] if code else [sys.executable, *flags]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def test_operator_and_runtime_are_subpackages() -> None:
    import specdeploy.operator
    import specdeploy.runtime

    assert Path(specdeploy.runtime.__file__ or "").resolve().parent == (ROOT / "runtime").resolve()
    assert any(
        Path(p).resolve() == (ROOT / "operator").resolve() for p in specdeploy.operator.__path__
    )
