"""A fixed, replayable list of generated SpeculativeDeployments (one seed, no database).

Hypothesis is used as a generator here, not as a test runner: the API server
and the operator are the system under test, checked in batches, which a
per-example property cannot express. Drawing every example of one seeded run
up front gives the same list for the same seed and code, so a failure found
at index i replays as index i (``python -m e2e.fuzz --seed S --only I``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from e2e.fuzz.strategies import bodies

Body = dict[str, Any]


def generate(count: int, *, seed_value: int) -> list[Body]:
    """``count`` bodies drawn by hypothesis from ``seed_value``; names made unique."""
    drawn: list[Body] = []

    @seed(seed_value)
    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
        derandomize=False,
    )
    @given(bodies())
    def collect(body: Body) -> None:
        drawn.append(body)

    collect()
    return [_unique(i, body) for i, body in enumerate(drawn[:count])]


def _unique(index: int, body: Body) -> Body:
    """Prefix the index, keeping the name's length (a 253-character name stays one)."""
    name = str(body["metadata"]["name"])
    prefix = f"f{index}-"
    body["metadata"] = {"name": (prefix + name[len(prefix) :]).rstrip(".-") or prefix.rstrip("-")}
    return body
