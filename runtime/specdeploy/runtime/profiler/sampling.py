"""How long one (batch size, K) cell is measured: repeat until the estimate is stable.

One *repeat* is one ``backend.measure(batch_size, k, steps)`` call, a fixed
number of decode steps after the backend's own warm-up. A cell is repeated
until the 95% confidence interval of its mean step time is narrower than a
fraction of the mean (``rel_ci``), between ``min_repeats`` and
``max_repeats``. The interval's half-width is the larger of two estimates
(``intervals``): batch means of consecutive steps within each repeat (steps
are autocorrelated, so single steps would understate the error), and the
repeats' own means, which catch drift between repeats (another prompt set,
clocks, a neighbour on the host) that the within-repeat spread hides; both
with Student's t quantiles, since there are few of either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specdeploy.runtime.intervals import BATCH_STEPS, batch_means, mean_half_width, t_quantile
from specdeploy.runtime.profiler.backend import CellSample

CLOSE_CALL_REPEATS = 5
"""Repeats each of two K gets, interleaved, while their goodput intervals overlap
(``search.settle``): one or two repeats of a prompt set say little about the next."""
TYPICAL_BETWEEN_CV = 0.03
"""Relative spread of a cell's repeat means on the 2-core CPU box (prompt sets, load)."""
MAX_BATCHES = 1 << 16
"""Bound of ``steps_to_reach``'s search (the caller caps steps far lower)."""


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

    def precision_warnings(self, between_cv: float = TYPICAL_BETWEEN_CV) -> list[str]:
        """What this rule cannot deliver, said before the run (the CLI prints these).

        A cell's interval is at least the between-repeat term, t(R - 1) times
        the repeats' spread over sqrt(R): with repeats that differ by
        ``between_cv`` (another prompt set; 3% is typical of the CPU box),
        ``rel_ci`` needs R repeats however many steps each has.
        """
        found = []
        needed = next(
            (r for r in range(2, 1000) if t_quantile(r - 1, self.z) * between_cv / math.sqrt(r)
             <= self.rel_ci),
            None,
        )  # fmt: skip
        if needed is None or needed > self.max_repeats:
            found.append(
                f"--ci {self.rel_ci:g} needs about {needed or '>1000'} repeats of a cell whose "
                f"repeats differ by {between_cv:.0%} (t quantiles), more than --max-repeats "
                f"{self.max_repeats}: such cells stop at their max-repeats interval"
            )
        if self.max_repeats < CLOSE_CALL_REPEATS:
            found.append(
                f"--max-repeats {self.max_repeats} < {CLOSE_CALL_REPEATS}: two K within each "
                "other's interval cannot get the interleaved repeats a close call needs; "
                "the table may pick either"
            )
        return found

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
    repeat_steps: list[int] = field(default_factory=list)
    """Steps of each repeat, in order (empty: equal repeats, as older raw files)."""
    prompts: set[str] = field(default_factory=set)
    """Distinct prompts decoded over all repeats (empty: the backend does not say)."""
    repeat_first: list[tuple[int, int]] = field(default_factory=list)
    """(reached, accepted) at position 1 of each repeat: how much acceptance moves
    between prompt sets beyond binomial noise (``Grid.acceptance_dispersion``)."""
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
        if len(self.repeat_steps) == self.repeats - 1:
            self.repeat_steps.append(len(times))
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
        self.prompts.update(sample.prompts)
        if self.k and sample.drafted:
            first_accepted = int(sample.accepted[0]) if sample.accepted else 0
            self.repeat_first.append((int(sample.drafted[0]), first_accepted))
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

    def repeat_series(self) -> list[list[float]]:
        """The step times of each repeat."""
        lengths = self.repeat_steps
        if len(lengths) != self.repeats or sum(lengths) != len(self.step_seconds):
            base, extra = divmod(len(self.step_seconds), max(self.repeats, 1))
            lengths = [base + (i < extra) for i in range(max(self.repeats, 1))]
        out, start = [], 0
        for n in lengths:
            out.append(self.step_seconds[start : start + n])
            start += n
        return out

    def half_width(self, z: float = 1.96) -> float:
        """95% CI half-width of the mean step time, seconds (module docstring)."""
        if len(self.step_seconds) < 2:
            return math.inf
        batched = mean_half_width(batch_means(self.repeat_series()), z)
        steps = mean_half_width(self.step_seconds, z)  # never narrower than independent steps
        between = mean_half_width(self.repeat_means, z) if self.repeats >= 2 else 0.0
        return max(batched, steps, between)

    def relative_half_width(self, z: float = 1.96) -> float:
        return self.half_width(z) / self.mean_seconds

    def steps_to_reach(self, rel_ci: float, z: float = 1.96) -> int:
        """Further steps that would bring the within-repeat interval within ``rel_ci``.

        From the spread of the batch means so far (t quantile at the batch
        count it would take); asking for them in one repeat pays the
        backend's warm-up once instead of once per small repeat.
        """
        means = batch_means(self.repeat_series())
        if len(means) < 2:
            return 0
        # the batch means' spread, or the steps' scaled to a batch where that is wider
        sd = max(
            float(np.std(means, ddof=1)),
            float(np.std(self.step_seconds, ddof=1)) / math.sqrt(BATCH_STEPS),
        )
        target = rel_ci * self.mean_seconds

        def enough(batches: int) -> bool:
            return t_quantile(batches - 1, z) * sd / math.sqrt(batches) <= target

        high = len(means)
        while not enough(high) and high < MAX_BATCHES:
            high *= 2
        low = max(len(means), high // 2)
        while low < high:  # the fewest batches that are enough
            mid = (low + high) // 2
            low, high = (low, mid) if enough(mid) else (mid + 1, high)
        return max(0, high * BATCH_STEPS - len(self.step_seconds))

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
