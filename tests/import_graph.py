"""The project's import graph read from the source: what loading a module loads.

Layering rules are about closures, not single files: a pure module that
imports a harmless-looking constant from a module that imports an HTTP
client loads that client too. So the layering and image tests walk the
graph. Import statements are read with ``ast`` (no module is executed);
lazy imports inside functions count, ``if TYPE_CHECKING:`` blocks do not;
importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so they
are part of the closure. Sources are found through pyproject's package-dir,
as the wheel maps them.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from tests.paths import ROOT

PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())


def module_path(module: str) -> Path | None:
    """The source file of a ``specdeploy`` module, from pyproject's package-dir."""
    package_dir: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        package = ".".join(parts[:n])
        if package not in package_dir:
            continue
        target = ROOT / package_dir[package] / Path(*parts[n:])
        candidates = [target / "__init__.py"]
        if n < len(parts):
            candidates.append(target.with_suffix(".py"))
        return next((c for c in candidates if c.is_file()), None)
    return None


class _Imports(ast.NodeVisitor):
    """Absolute names imported by one module, lazy ones included, TYPE_CHECKING ones not."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.names: list[str] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.extend(a.name for a in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        self.names.append(module)
        self.names.extend(f"{module}.{a.name}" for a in node.names)


@cache
def imported_names(module: str) -> tuple[str, ...]:
    """The absolute names the module's import statements name (``from m import x``: m, m.x)."""
    path = module_path(module)
    if path is None:
        return ()
    visitor = _Imports(module, path.name == "__init__.py")
    visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
    return tuple(visitor.names)


def _loaded(name: str) -> Iterator[str]:
    """The project modules importing ``name`` runs: its packages, then itself if it is one."""
    parts = name.split(".")
    for n in range(1, len(parts) + 1):
        prefix = ".".join(parts[:n])
        if module_path(prefix) is not None:
            yield prefix


def closure(roots: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(importing project module, imported name) for every import reached from ``roots``.

    Project modules are followed; other names (stdlib, third party) are
    reported as written and not followed.
    """
    seen: set[str] = set()
    todo = [m for root in roots for m in _loaded(root)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in imported_names(module):
            if name.split(".")[0] == "specdeploy":
                todo.extend(_loaded(name))
            yield module, name


def project_modules(roots: Iterable[str]) -> set[str]:
    """Every project module loading ``roots`` loads (the roots and their packages included)."""
    found = {m for root in roots for m in _loaded(root)}
    for _, name in closure(roots):
        found.update(_loaded(name))
    return found
