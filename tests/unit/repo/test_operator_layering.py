"""The operator's layers: handlers -> controller -> (reconcile, writes: pure) -> k8s (I/O) -> api.

Pure modules decide without I/O: they may not import the client, the
handlers, kopf or a network library. Checked on the source with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

OPERATOR = ROOT / "operator"
IMPURE = (
    "kopf",
    "http",
    "urllib",
    "socket",
    "ssl",
    "specdeploy.operator.k8s",
    "specdeploy.operator.handlers",
    "specdeploy.operator.reconcile",
    "specdeploy.operator.main",
)
IO_MODULES = {"k8s.py", "handlers.py", "controller.py", "main.py", "crdgen.py"}
PURE = sorted(p for p in OPERATOR.rglob("*.py") if p.name not in IO_MODULES)


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(OPERATOR)))
def test_a_pure_module_imports_no_io(path: Path) -> None:
    bad = {m for m in imports(path) for i in IMPURE if m == i or m.startswith(i + ".")}
    assert bad == set()


def test_only_k8s_talks_to_the_api_server() -> None:
    transport = {"http.client", "specdeploy.runtime.kubeapi"}  # the shared client
    users = [p.name for p in OPERATOR.rglob("*.py") if imports(p) & transport]
    assert users == ["k8s.py"]


def test_the_operator_folder_has_no_init_so_it_never_shadows_the_stdlib() -> None:
    assert not (OPERATOR / "__init__.py").exists()
