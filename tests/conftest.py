"""Shared pytest configuration: every test under tests/unit is a unit test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: timing belongs in bench/, and a loaded 2-core CI
# box made a 20 ms example take 4 s. Under CI the examples are derandomized
# so a run is reproducible; locally they stay random to keep finding cases.
settings.register_profile("specdeploy", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("specdeploy")

UNIT_DIR = Path(__file__).parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.unit)
