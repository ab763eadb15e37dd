"""Polling until a condition holds: how tests and the harness wait on an eventually consistent API.

Controllers converge asynchronously, so every assertion about cluster state
is "eventually". ``wait_for`` polls a function until it returns something
truthy and, on timeout, fails with what it was waiting for and the last value
it saw - the detail a test failure needs to be read without re-running.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold in time; the message has the last value seen."""


def wait_for(
    poll: Callable[[], T | None],
    *,
    what: str,
    timeout: float = 60.0,
    interval: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Return the first truthy value of ``poll()``; raise WaitTimeout after ``timeout`` s."""
    deadline = clock() + timeout
    while True:
        value = poll()
        if value:
            return value
        if clock() > deadline:
            raise WaitTimeout(
                f"timed out after {timeout:.0f} s waiting for {what}; last: {value!r}"
            )
        sleep(interval)
