"""Is the live drafting rate still the profile's? A verdict per window, for a warning and a metric.

n-gram and suffix drafters propose only where the context repeats, so how
often they propose is a property of the workload, like acceptance: in the
shipped SmolLM2 n-gram profile 28% of sequence-steps had a draft at all.
The profile's schedule was derived for its drafting rate
(``acceptance.draftingRate[0]``, q_1 = proposed/reached at position 1); a
workload that drafts much less pays the speculation overhead for fewer
tokens than the table assumed, one that drafts much more leaves gains
unclaimed. The adaptive policy learns acceptance (with missing drafts as
rejections) either way; the warning tells an operator that the profile no
longer describes the traffic, whatever policy runs.

The rate is judged over tumbling windows of ``WINDOW`` sequence-steps that
reached position 1, and a window is *out* when it differs from the
profile's by more than ``TOLERANCE`` (absolute) and by more than ``Z``
binomial standard errors of the window (so a small window's noise is not
drift). The state (``within``, ``below``, ``above``) changes only when a
window closes; the caller logs once per distinct state.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import NamedTuple

WINDOW = 1000
"""Sequence-steps reaching position 1 per judgement (about 60 steps at batch 16)."""
TOLERANCE = 0.10
"""Absolute difference in q_1 that counts as leaving the profile's drafting rate."""
Z = 3.0
"""Standard errors the difference must also exceed (q(1-q)/n at the profile's q)."""


class Drift(Enum):
    """Where the last window's drafting rate lies against the profile's."""

    WITHIN = 0
    BELOW = -1
    ABOVE = 1


class DraftingWindow(NamedTuple):
    """One closed window."""

    rate: float
    reference: float
    state: Drift
    changed: bool
    """The state differs from the previous window's (log it)."""


class DraftingRateWatch:
    """Accumulates position-1 counts; judges each full window (module docstring)."""

    def __init__(
        self, reference: float | None, *, window: int = WINDOW, tolerance: float = TOLERANCE
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.reference = reference
        self.window = window
        self.tolerance = tolerance
        self.state = Drift.WITHIN
        self._reached = 0
        self._proposed = 0

    def add(self, reached: int, proposed: int) -> DraftingWindow | None:
        """One step's position-1 counts; a verdict when they complete a window."""
        self._reached += reached
        self._proposed += proposed
        if self._reached < self.window:
            return None
        n, rate = self._reached, self._proposed / self._reached
        self._reached = self._proposed = 0
        if self.reference is None:
            return None
        state = self.judge(rate, n)
        changed = state is not self.state
        self.state = state
        return DraftingWindow(rate, self.reference, state, changed)

    def judge(self, rate: float, n: int) -> Drift:
        """The state of a window of ``n`` reached sequence-steps at ``rate``."""
        assert self.reference is not None
        q = self.reference
        gap = rate - q
        noise = Z * math.sqrt(max(q * (1.0 - q), 1e-12) / n)
        if abs(gap) <= max(self.tolerance, noise):
            return Drift.WITHIN
        return Drift.ABOVE if gap > 0 else Drift.BELOW
