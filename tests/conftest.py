"""Shared pytest configuration: every test under tests/unit is a unit test."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.unit)
