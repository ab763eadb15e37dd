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


def test_a_denied_access_check_is_asked_again_before_it_fails() -> None:
    """Review H5: the operator creates the RoleBinding in the reconcile that creates the
    Job; an authorizer a moment behind denied the first review and the Job failed for good."""
    clock = Clock()
    answers = iter([False, False, False, True, True, True])

    class Reviews:
        def exchange(self, method: str, path: str, **_: Any) -> tuple[int, bytes]:
            return 201, json.dumps({"status": {"allowed": next(answers)}}).encode()

    w = ApiWriter(Reviews(), "ns", name="p", sleep=clock.sleep, clock=clock, log=lambda _: None)
    w.check_access()
    assert 0 < clock.now < 60


def test_a_denial_that_lasts_fails_deterministically_after_a_minute() -> None:
    clock = Clock()

    class Denied:
        def exchange(self, method: str, path: str, **_: Any) -> tuple[int, bytes]:
            return 201, json.dumps({"status": {"allowed": False}}).encode()

    w = ApiWriter(Denied(), "ns", name="p", sleep=clock.sleep, clock=clock, log=lambda _: None)
    with pytest.raises(DeterministicFailure):
        w.check_access()
    assert 30 <= clock.now <= 60


def test_a_final_write_that_gives_up_leaves_the_whole_profile_in_the_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review H5: hours of measurement were lost with the pod; now the log keeps them."""
    import yaml

    from specdeploy.runtime.profiler import run
    from specdeploy.runtime.profiler.writer import BEGIN_MARKER, END_MARKER

    class Failing:
        def write(self, doc: Any) -> str:
            raise KubeUnavailable("the API server is gone")

    with pytest.raises(KubeUnavailable):
        run._write_all([Failing()], DOC)
    out = capsys.readouterr().out
    inside = out.split(BEGIN_MARKER, 1)[1].split(END_MARKER, 1)[0]
    assert load_profile_text(inside) == yaml.safe_load(
        yaml.safe_dump(DOC.to_document(), sort_keys=True)
    )


def load_profile_text(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)
