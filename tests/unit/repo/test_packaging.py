"""The distribution: one path per module, nothing dev-only in the wheel, the stdlib unshadowed.

Layout B (``shared/reviews/house.md`` §1.3): ``specdeploy`` is a namespace
package over three roots, ``specdeploy/`` (the CLI), ``operator/`` (holding
``specdeploy/operator/``) and ``runtime/`` (holding ``specdeploy/runtime/``),
so every module's file path ends with its import path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.paths import ROOT


def _setuptools() -> dict[str, object]:
    config: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]
    return config


def _module_name(path: Path) -> str:
    """The import name a source file has, from its path under its root."""
    for root in (ROOT / "operator", ROOT / "runtime", ROOT):
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if rel.parts[0] == "specdeploy":
            return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
    raise AssertionError(f"{path} is under no source root")


def _package_of(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def test_the_package_dir_has_three_roots_whose_paths_end_with_their_names() -> None:
    dirs = _setuptools()["package-dir"]
    assert isinstance(dirs, dict)
    assert dirs == {
        "specdeploy": "specdeploy",
        "specdeploy.operator": "operator/specdeploy/operator",
        "specdeploy.runtime": "runtime/specdeploy/runtime",
    }
    for name, folder in dirs.items():
        assert folder.replace("/", ".").endswith(name)


def test_every_python_folder_is_a_listed_package() -> None:
    packages = _setuptools()["packages"]
    assert isinstance(packages, list)
    sources = [
        *(ROOT / "specdeploy").rglob("*.py"),
        *(ROOT / "operator").rglob("*.py"),
        *(ROOT / "runtime").rglob("*.py"),
    ]
    folders = {_package_of(py) for py in sources}
    assert folders - {"specdeploy"} <= set(packages) - {"specdeploy"}
    assert set(packages) <= folders | {"specdeploy"}


def test_no_symlink_is_committed() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000")]
    assert links == []


def test_the_namespace_has_no_init_and_the_roots_hold_no_module() -> None:
    assert not (ROOT / "specdeploy" / "__init__.py").exists()
    for root in ("operator", "runtime"):
        assert not (ROOT / root / "specdeploy" / "__init__.py").exists()
        assert not list((ROOT / root).glob("*.py")), f"{root}/ holds a module: it could shadow"


def test_stdlib_operator_is_not_shadowed_from_the_repository_root() -> None:
    code = "import operator; print(operator.__file__); operator.itemgetter"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert not Path(done.stdout.strip()).is_relative_to(ROOT)


@pytest.mark.parametrize(
    "name",
    [
        "specdeploy.operator.clients.k8s",
        "specdeploy.runtime.policy.adaptive",
        "specdeploy.cli.table",
    ],
)
def test_a_modules_file_path_ends_with_its_import_path(name: str) -> None:
    module = __import__(name, fromlist=["_"])
    path = Path(module.__file__ or "")
    assert path.resolve() == path, "imported through a link"
    assert path.with_suffix("").as_posix().endswith(name.replace(".", "/"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel, built from a copy of the checkout (setuptools writes build/ into the source)."""
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("specdeploy-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_product_and_no_dev_code(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {n.split("/")[1] for n in names if n.startswith("specdeploy/") and n.count("/") > 1}
    assert tops == {"chart", "cli", "operator", "runtime"}
    assert "specdeploy/runtime/vllm_addon/scheduler.py" in names
    assert "specdeploy/operator/builders/job.py" in names
    assert "specdeploy/__init__.py" not in names
    dev_only = [
        n
        for n in names
        if "localcluster" in n or n.startswith(("e2e/", "tests/")) or "/models/" in n
    ]
    assert dev_only == []


def test_the_wheel_declares_ranges_not_pins(wheel: zipfile.ZipFile) -> None:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in wheel.read(meta).decode().splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    assert requires, "no requirements read"
    pinned = [r for r in requires if "==" in r.partition(";")[0]]
    assert pinned == [], "a library pins exact versions only in constraints/"
    core = [r for r in requires if "extra ==" not in r]
    assert not any(r.lower().startswith("matplotlib") for r in core)
