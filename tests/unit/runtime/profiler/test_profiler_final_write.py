"""The final write outlasts an API outage and a token rotation (review H5, inverted probe).

At 7a48b4a the profiler's only write of hours of measurement gave up after
about 3.5 s of outage (four tries, 0.5 s doubling), and a 401/403 at that
moment was final. Now it keeps trying for ``patience`` seconds; only answers
about the document itself fail at once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from specdeploy.runtime.profile import load_profile
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure
from specdeploy.runtime.profiler.writer import ApiWriter, KubeUnavailable
from tests.paths import EXAMPLES

DOC = load_profile(EXAMPLES / "profile-example.yaml")


class Scripted:
    """An Exchanger answering POSTs from a script: a status, or an exception to raise."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.posts = 0

    def exchange(self, method: str, path: str, **_: Any) -> tuple[int, bytes]:
        assert method == "POST", (method, path)
        self.posts += 1
        answer = self.answers.pop(0) if self.answers else 201
        if isinstance(answer, BaseException):
            raise answer
        body = {"kind": "Status", "message": f"HTTP {answer}"} if answer >= 400 else {}
        return answer, json.dumps(body).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def writer(api: Scripted, clock: Clock, patience: float = 600.0) -> ApiWriter:
    return ApiWriter(
        api, "ns", name="p", sleep=clock.sleep, clock=clock, patience=patience, log=lambda _: None
    )


def test_a_two_minute_outage_is_waited_out() -> None:
    clock = Clock()
    api = Scripted([ConnectionRefusedError("refused")] * 60 + [503] * 20)
    assert "(created)" in writer(api, clock).write(DOC)
    assert clock.now >= 60, "it waited out the outage instead of giving up in seconds"


@pytest.mark.parametrize("status", [401, 403])
def test_an_identity_refusal_after_measuring_is_waited_out(status: int) -> None:
    clock = Clock()
    api = Scripted([status] * 3)
    assert "(created)" in writer(api, clock).write(DOC)


def test_a_refusal_of_the_document_fails_at_once() -> None:
    clock = Clock()
    api = Scripted([422])
    with pytest.raises(DeterministicFailure):
        writer(api, clock).write(DOC)
    assert api.posts == 1


def test_it_gives_up_after_its_patience_as_a_transient_failure() -> None:
    clock = Clock()
    api = Scripted([503] * 10_000)
    with pytest.raises(KubeUnavailable, match="gave up writing the profile"):
        writer(api, clock, patience=120.0).write(DOC)
    assert 90 <= clock.now <= 150
