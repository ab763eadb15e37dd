"""Layering: the runtime runs inside vLLM pods and must never import the operator.

Nor the CLI, kopf (the operator's framework) or ``e2e`` (the local-cluster
harness, not shipped). Checked per file on the source with ``ast`` (lazy
imports inside functions included): every runtime module is checked, so a
chain through the runtime is caught at its first link.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import ROOT

RUNTIME_MAY_NOT_IMPORT = ("specdeploy.operator", "specdeploy.cli", "kopf", "e2e")


def imported_modules(source: str) -> Iterator[str]:
    """Every absolute module name an import statement in ``source`` names."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def forbidden_imports(source: str) -> list[str]:
    return sorted(
        {
            name
            for name in imported_modules(source)
            for banned in RUNTIME_MAY_NOT_IMPORT
            if name == banned or name.startswith(banned + ".")
        }
    )


@pytest.mark.parametrize(
    "path", sorted((ROOT / "runtime").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_runtime_module_does_not_import_the_operator_or_the_cli(path: Path) -> None:
    assert forbidden_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "import specdeploy.operator.api",
        "from specdeploy.operator import api",
        "from specdeploy import operator",
        "def f():\n    from specdeploy.cli.table import register\n",
        "import kopf",
        "from e2e.localcluster import kubeapi",
    ],
)
def test_the_check_catches_each_import_form(source: str) -> None:
    assert forbidden_imports(source) != []


def test_the_check_allows_the_stdlib_operator() -> None:
    assert forbidden_imports("import operator\nfrom operator import itemgetter") == []
