"""Fixtures of the load generator's tests: a fake OpenAI streaming server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.loadgen.fake_openai import FakeOpenAI, serve


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    yield from serve()
