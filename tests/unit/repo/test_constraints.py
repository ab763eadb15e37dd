"""The lock in constraints/ agrees with pyproject's ranges (a stale lock fails here).

pyproject declares what the code needs; constraints/dev.txt and
constraints/runtime.txt record one resolution of it (``make lock``). Every
requirement of the extras they were made for must be pinned there, at a
version inside its declared range.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(lock: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (ROOT / "constraints" / f"{lock}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = version.strip()
    return found


def requirements(*extras: str) -> list[Requirement]:
    """The core requirements and those of ``extras``, self-references expanded."""
    out = [Requirement(r) for r in PYPROJECT["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in PYPROJECT["optional-dependencies"][extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == "specdeploy":
                todo.extend(req.extras)
            else:
                out.append(req)
    return out


@pytest.mark.parametrize(("lock", "extras"), [("dev", ("dev",)), ("runtime", ("runtime", "data"))])
def test_every_declared_requirement_is_locked_inside_its_range(
    lock: str, extras: tuple[str, ...]
) -> None:
    locked = pins(lock)
    for req in requirements(*extras):
        name = canonicalize_name(req.name)
        assert name in locked, f"constraints/{lock}.txt lacks {req.name} (make lock)"
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"constraints/{lock}.txt pins {req.name}=={locked[name]}, outside {req}"
        )


def test_the_vllm_cpu_venv_satisfies_what_the_runtime_declares() -> None:
    """The CPU venv runs the add-on and the profiler: the runtime's ranges hold there too
    (vLLM itself is the ``vllm-cpu`` distribution there, at the version under test)."""
    locked = pins("vllm-cpu")
    for req in requirements("runtime", "data"):
        name = canonicalize_name(req.name)
        if name == "vllm":
            continue
        assert name in locked and req.specifier.contains(locked[name], prereleases=True), (
            f"constraints/vllm-cpu.txt: {req.name} {locked.get(name)} outside {req}"
        )


def test_the_runtime_lock_resolves_the_vllm_under_test() -> None:
    version = re.search(
        r"^VLLM_VERSION=(\S+)$", (ROOT / "constraints" / "versions.env").read_text(), re.M
    )
    assert version is not None
    assert pins("runtime")["vllm"] == version.group(1)
