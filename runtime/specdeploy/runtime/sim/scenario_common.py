"""What every scenario does the same way: run each policy on each seed, and window a trace.

A scenario returns ``(rows, info)``: one ``PolicyResult`` per policy, its
per-seed figures inside, and a dict describing the scenario (the JSON's
``scenario`` block). All figures are modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specdeploy.runtime.sim.compare import Comparison, PolicyResult
from specdeploy.runtime.sim.engine import StepTrace
from specdeploy.runtime.sim.seeds import SeedFigures

Figures = Mapping[str, float | int | None]
Progress = Callable[[str], None] | None
ScenarioOutput = tuple[list[PolicyResult], dict[str, Any]]


def over_seeds(
    cmp: Comparison,
    policies: Sequence[str],
    run_one: Callable[[str, int], Figures],
    *,
    batch_size: Callable[[Figures], float] | float = 0.0,
    label: str = "",
    progress: Progress = None,
    extra: Callable[[str, list[SeedFigures]], dict[str, Any]] | None = None,
) -> list[PolicyResult]:
    """``run_one(policy, seed)`` for every seed and policy, gathered into rows.

    ``batch_size`` is a number, or read from the figures (their mean over
    seeds) as the record's ``batch_size``; ``extra`` adds per-row keys.
    """
    per_policy: dict[str, list[SeedFigures]] = {p: [] for p in policies}
    for seed in cmp.settings.seeds:
        for name in policies:
            if progress:
                progress(f"{label}{name}, seed {seed}")
            per_policy[name].append(SeedFigures(seed, run_one(name, seed)))
    rows = []
    for name in policies:
        runs = per_policy[name]
        if callable(batch_size):
            bs = float(np.mean([batch_size(r.figures) for r in runs]))
        else:
            bs = float(batch_size)
        rows.append(PolicyResult(name, bs, tuple(runs), extra(name, runs) if extra else {}))
    return rows


def window_tokens_per_s(trace: StepTrace, start: int, stop: int | None = None) -> float:
    """Tokens per engine second over counted steps [start, stop)."""
    tokens = float(trace.tokens[start:stop].sum())
    seconds = float(trace.seconds[start:stop].sum())
    return tokens / seconds if seconds > 0 else 0.0


def mean_bs(figures: Figures) -> float:
    """The mean batch size of a run (the record's ``batch_size`` for single-load scenarios)."""
    value = figures.get("mean_batch_size")
    return float(value) if value is not None else 0.0
