"""Figures over several seeds: the mean a table shows and the spread that qualifies it.

One seed is one draw of request lengths, arrivals and acceptance. A
difference between two policies smaller than the spread between seeds is
not a difference, so every comparison runs each policy on the same seeds
(paired: the same requests and random stream per seed) and reports the
mean with the standard deviation, minimum and maximum across seeds, and the
per-seed figures themselves. All figures are modelled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2)
"""At least three seeds, so that a spread exists."""


@dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation (0 for one seed), minimum and maximum."""

    mean: float
    sd: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values to summarise")
        n = len(values)
        mean = math.fsum(values) / n
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
        return cls(mean, sd, min(values), max(values))

    def record(self, digits: int = 4) -> dict[str, float]:
        return {
            "mean": round(self.mean, digits),
            "sd": round(self.sd, digits),
            "min": round(self.min, digits),
            "max": round(self.max, digits),
        }


@dataclass(frozen=True)
class SeedFigures:
    """One policy's figures on one seed (numbers only, keyed by metric name)."""

    seed: int
    figures: Mapping[str, float | int | None]

    def record(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.figures.items()},
        }


def spreads(runs: Sequence[SeedFigures]) -> dict[str, Spread]:
    """A Spread per metric present (and numeric) on every seed."""
    if not runs:
        return {}
    out: dict[str, Spread] = {}
    for name in runs[0].figures:
        values = [r.figures.get(name) for r in runs]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[name] = Spread.of([float(v) for v in values if v is not None])
    return out


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: comma-separated, distinct, non-negative integers."""
    try:
        seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError(f"--seeds: give at least one seed >= 0, got {text!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds: a seed is listed twice in {text!r}")
    return seeds
