"""How long one (batch size, K) cell is measured: repeat until the estimate is stable.

One *repeat* is one ``backend.measure(batch_size, k, steps)`` call, a fixed
number of decode steps after the backend's own warm-up. A cell is repeated
until the 95% confidence interval of its mean step time is narrower than a
fraction of the mean (``rel_ci``), between ``min_repeats`` and
``max_repeats``. The interval's half-width is the larger of two estimates:
steps taken as independent (``z * s / sqrt(n)``), and repeats taken as
independent batch means (``z * s_means / sqrt(R)``), which catches drift
between repeats (clocks, thermals, a neighbour on the host) that the
step-to-step spread hides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specdeploy.runtime.profiler.backend import CellSample


@dataclass(frozen=True)
class Sampling:
    """The stopping rule of one cell's repeats."""

    steps: int = 32
    """Decode steps per repeat (one ``measure`` call)."""
    min_repeats: int = 1
    max_repeats: int = 16
    rel_ci: float = 0.01
    """Stop once the 95% CI half-width is at most this fraction of the mean."""
    z: float = 1.96
    max_steps_factor: int = 8
    """A repeat asks for up to this many times ``steps`` when the spread so far
    says that many are needed (``CellStats.steps_to_reach``)."""

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise ValueError(f"steps per repeat must be >= 2, got {self.steps}")
        if not 1 <= self.min_repeats <= self.max_repeats:
            raise ValueError(
                f"need 1 <= min_repeats <= max_repeats, got {self.min_repeats}, {self.max_repeats}"
            )
        if not 0 < self.rel_ci < 1:
            raise ValueError(f"rel_ci must lie in (0, 1), got {self.rel_ci}")
        if self.max_steps_factor < 1:
            raise ValueError(f"max_steps_factor must be >= 1, got {self.max_steps_factor}")

    def steps_for(self, stats: CellStats, rel_ci: float | None = None) -> int:
        """Steps for the cell's next repeat: the base, or what the spread says is missing."""
        if stats.repeats < self.min_repeats:
            return self.steps
        wanted = stats.steps_to_reach(self.rel_ci if rel_ci is None else rel_ci, self.z)
        return min(max(self.steps, wanted), self.steps * self.max_steps_factor)


@dataclass
class CellStats:
    """Everything measured for one cell so far (all repeats pooled).

    ``drafted`` counts positions *reached* (``backend.CellSample``). The
    optional counts and totals stay None unless every repeat carried them:
    a pooled figure from some repeats only would mix two populations.
    """

    batch_size: int
    k: int
    step_seconds: list[float] = field(default_factory=list)
    repeat_means: list[float] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    proposed: list[int] | None = None
    offered: list[int] | None = None
    scheduled: list[int] | None = None
    sequence_steps: int | None = None
    verified_tokens: int | None = None
    context_tokens: int | None = None

    def add(self, sample: CellSample) -> None:
        """Pool one repeat; positions beyond the current length extend the counts."""
        if (sample.batch_size, sample.k) != (self.batch_size, self.k):
            raise ValueError(
                f"sample for cell ({sample.batch_size}, {sample.k}) "
                f"added to cell ({self.batch_size}, {self.k})"
            )
        times = [float(t) for t in sample.step_seconds]
        if not times or any(not math.isfinite(t) or t <= 0 for t in times):
            raise ValueError(f"cell ({self.batch_size}, {self.k}): step times must be > 0")
        self.step_seconds.extend(times)
        self.repeat_means.append(sum(times) / len(times))
        if len(sample.accepted) > len(sample.drafted) or any(
            a > d for a, d in zip(sample.accepted, sample.drafted, strict=False)
        ):
            raise ValueError(
                f"cell ({self.batch_size}, {self.k}): accepted exceeds drafted at some position"
            )
        first = self.repeats == 1
        if sample.proposed is not None and any(
            p > d for p, d in zip(sample.proposed, sample.drafted, strict=False)
        ):
            raise ValueError(
                f"cell ({self.batch_size}, {self.k}): proposed exceeds reached at some position"
            )
        _add_counts(self.drafted, sample.drafted)
        _add_counts(self.accepted, sample.accepted)
        self.proposed = _pooled_counts(self.proposed, sample.proposed, first)
        self.offered = _pooled_counts(self.offered, sample.offered, first)
        self.scheduled = _pooled_counts(self.scheduled, sample.scheduled, first)
        self.sequence_steps = _pooled_total(self.sequence_steps, sample.sequence_steps, first)
        self.verified_tokens = _pooled_total(self.verified_tokens, sample.verified_tokens, first)
        self.context_tokens = _pooled_total(self.context_tokens, sample.context_tokens, first)

    @property
    def repeats(self) -> int:
        return len(self.repeat_means)

    @property
    def samples(self) -> int:
        """Steps measured (the profile's ``samples``)."""
        return len(self.step_seconds)

    @property
    def mean_seconds(self) -> float:
        return float(np.mean(self.step_seconds))

    @property
    def itl_ms(self) -> float:
        return self.mean_seconds * 1e3

    @property
    def measured_seconds(self) -> float:
        """Engine time spent in counted steps (warm-up excluded)."""
        return float(np.sum(self.step_seconds))

    def half_width(self, z: float = 1.96) -> float:
        """95% CI half-width of the mean step time, seconds (module docstring)."""
        n = len(self.step_seconds)
        if n < 2:
            return math.inf
        within = float(np.std(self.step_seconds, ddof=1)) / math.sqrt(n)
        between = 0.0
        if self.repeats >= 2:
            between = float(np.std(self.repeat_means, ddof=1)) / math.sqrt(self.repeats)
        return z * max(within, between)

    def relative_half_width(self, z: float = 1.96) -> float:
        return self.half_width(z) / self.mean_seconds

    def steps_to_reach(self, rel_ci: float, z: float = 1.96) -> int:
        """Further steps that would bring the step-to-step interval within ``rel_ci``.

        From the spread seen so far; asking for them in one repeat pays the
        backend's warm-up once instead of once per small repeat.
        """
        n = len(self.step_seconds)
        if n < 2:
            return 0
        sd = float(np.std(self.step_seconds, ddof=1))
        needed = math.ceil((z * sd / (rel_ci * self.mean_seconds)) ** 2)
        return max(0, needed - n)

    @property
    def seq_steps(self) -> int:
        """Sequence-steps measured: the backend's count; else those that reached position
        1 (every sequence-step of a K >= 1 cell does, so the counts' own population);
        else batch size x steps (every kept step decodes the whole batch)."""
        if self.sequence_steps is not None:
            return self.sequence_steps
        if self.k and self.drafted:
            return self.drafted[0]
        return self.batch_size * self.samples

    def acceptance_length(self) -> float | None:
        """Tokens per sequence per step observed in this cell (None at K=0 or no steps).

        A sequence-step that proposed nothing produced one token: this is the
        realized figure, the one meaning of ``acceptanceLength``.
        """
        if self.k == 0 or not self.seq_steps:
            return None
        return 1.0 + sum(self.accepted[: self.k]) / self.seq_steps

    def verified_per_sequence(self) -> float | None:
        """Mean tokens a sequence verified per step (1 + proposal length), when recorded."""
        if self.verified_tokens is None or not self.seq_steps:
            return None
        return self.verified_tokens / self.seq_steps

    def context_per_sequence(self) -> float | None:
        """Mean context (KV entries) a sequence read per step, when recorded."""
        if self.context_tokens is None or not self.seq_steps:
            return None
        return self.context_tokens / self.seq_steps

    def drafting_rate(self) -> float | None:
        """Share of sequence-steps with a draft at position 1 (None at K=0 or unrecorded)."""
        if self.k == 0 or self.proposed is None or not self.drafted or not self.drafted[0]:
            return None
        return self.proposed[0] / self.drafted[0]

    def stable(self, rule: Sampling) -> bool:
        """Whether the rule says to stop repeating this cell."""
        if self.repeats < rule.min_repeats:
            return False
        if self.repeats >= rule.max_repeats:
            return True
        return self.relative_half_width(rule.z) <= rule.rel_ci


def _pooled_counts(
    total: list[int] | None, more: Sequence[int] | None, first: bool
) -> list[int] | None:
    """Per-position counts summed over repeats; None once a repeat lacked them."""
    if more is None or (total is None and not first):
        return None
    pooled = [] if total is None else total
    _add_counts(pooled, more)
    return pooled


def _pooled_total(total: int | None, more: int | None, first: bool) -> int | None:
    """A total summed over repeats; None once a repeat lacked it."""
    if more is None or (total is None and not first):
        return None
    return int(more) + (0 if total is None else total)


def _add_counts(total: list[int], more: Sequence[int]) -> None:
    values = [int(v) for v in more]
    if any(v < 0 for v in values):
        raise ValueError("draft counts must be >= 0")
    total.extend([0] * (len(values) - len(total)))
    for i, v in enumerate(values):
        total[i] += v
