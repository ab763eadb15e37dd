"""The operator's layers: main -> handlers -> reconcile -> k8s (I/O) -> plan, decide, ... (pure).

Pure modules decide without I/O. Through any chain of imports they may not
load the API client, kopf, an HTTP or TLS library, or the operator's I/O
modules; of ``specdeploy.runtime.kube`` they may load only the pure
``paths`` and ``requests`` (and the package, which imports nothing). The
rule is about closures (``tests.import_graph``): a constant imported from a
module that imports the client loads the client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import closure, imported_names, module_path, project_modules
from tests.paths import ROOT

SOURCE = ROOT / "operator"
IO_MODULES = {"k8s.py", "handlers.py", "reconcile.py", "main.py", "crdgen.py"}
PURE_KUBE = {
    "specdeploy.runtime.kube",
    "specdeploy.runtime.kube.paths",
    "specdeploy.runtime.kube.requests",
}
IMPURE = (
    "kopf",
    "kubernetes",
    "urllib3",
    "http",
    "ssl",
    "socket",
    "urllib.request",
    "specdeploy.runtime.kube",
    "specdeploy.runtime.profiler.run",
    "specdeploy.operator.k8s",
    "specdeploy.operator.handlers",
    "specdeploy.operator.reconcile",
    "specdeploy.operator.main",
)


def module_name(path: Path) -> str:
    relative = path.relative_to(SOURCE).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


OPERATOR = sorted(SOURCE.rglob("*.py"))
PURE = [p for p in OPERATOR if p.name not in IO_MODULES]


def _impure(name: str) -> bool:
    if name in PURE_KUBE or (name.rpartition(".")[0] in PURE_KUBE and module_path(name) is None):
        return False  # a pure kube module, or a name imported from one
    return any(name == bad or name.startswith(bad + ".") for bad in IMPURE)


def violations(module: str) -> list[str]:
    """``importer -> name`` for every impure import loading ``module`` reaches."""
    return sorted({f"{m} -> {n}" for m, n in closure([module]) if _impure(n)})


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(SOURCE)))
def test_a_pure_module_loads_no_io_through_any_chain(path: Path) -> None:
    assert violations(module_name(path)) == []


def test_the_check_follows_chains() -> None:
    # reconcile imports no client itself: it reaches one through k8s.
    found = violations("specdeploy.operator.reconcile")
    assert "specdeploy.operator.reconcile -> specdeploy.operator.k8s" in found
    assert any(v.endswith("-> kubernetes.client") for v in found)


def test_the_pure_kube_modules_load_no_client() -> None:
    loaded = project_modules(sorted(PURE_KUBE))
    assert not {m for m in loaded if m.startswith("specdeploy.runtime.kube.")} - PURE_KUBE
    network = {"kubernetes", "urllib3", "http", "ssl", "socket"}
    assert [n for _, n in closure(sorted(PURE_KUBE)) if n.split(".")[0] in network] == []


def test_only_k8s_talks_to_the_api_server() -> None:
    client = ("specdeploy.runtime.kube.client", "specdeploy.runtime.kube.config")
    users = [p.name for p in OPERATOR if any(n.startswith(client) for n in imported(p))]
    assert users == ["k8s.py"]


def imported(path: Path) -> tuple[str, ...]:
    return imported_names(module_name(path))


def test_the_operator_folder_has_no_init_so_it_never_shadows_the_stdlib() -> None:
    assert not (SOURCE / "__init__.py").exists()
