"""The saved failing cases (``regressions/*.yaml``) and what each must now do.

A fixture holds the body the fuzzer sent, where it was found, and the
expected outcome once fixed: ``rejected`` (422 naming ``field``),
``invalid`` (Valid=False naming ``field``) or ``valid`` (and no violation).
``knownDefect`` marks a case whose fix lies outside the API's models and
validation (named there); its replay is a strict xfail, so the marker must go
when the defect is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.fuzz.runner import Outcome

FOLDER = Path(__file__).resolve().parent / "regressions"
OUTCOMES = ("rejected", "invalid", "valid")


@dataclass(frozen=True)
class Regression:
    name: str
    body: dict[str, Any]
    outcome: str
    field: str | None
    known_defect: str | None


def load(path: Path) -> Regression:
    data = yaml.safe_load(path.read_text())
    expect = data["expect"]
    if expect["outcome"] not in OUTCOMES:
        raise ValueError(f"{path}: expect.outcome must be one of {OUTCOMES}")
    if expect["outcome"] != "valid" and not expect.get("field"):
        raise ValueError(f"{path}: a rejected or invalid case names its field")
    return Regression(
        name=path.stem,
        body=data["body"],
        outcome=expect["outcome"],
        field=expect.get("field"),
        known_defect=data.get("knownDefect"),
    )


def load_all(folder: Path = FOLDER) -> list[Regression]:
    return [load(p) for p in sorted(folder.glob("*.yaml"))]


def problems(case: Regression, outcome: Outcome) -> list[str]:
    """How the replayed outcome differs from the fixture's expectation."""
    found = list(outcome.violations)
    if outcome.kind != case.outcome:
        found.append(f"expected {case.outcome}, got {outcome.kind} ({outcome.message[:200]})")
    elif case.field is not None and case.field not in outcome.message:
        found.append(f"expected the message to name {case.field}: {outcome.message[:200]}")
    return found
