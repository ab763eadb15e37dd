"""What the adaptive policy reports about itself: per-K predictions and live estimates.

Plain frozen dataclasses, so that telemetry (the add-on's metrics, the
operator's live profile status) can read them without touching the policy's
internals.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KEstimate:
    """What the policy predicts for one K at one batch size (see ``explain``)."""

    k: int
    acceptance_length: float
    itl_ms: float
    goodput: float
    """Tokens per second per sequence: AL / ITL."""
    chosen: bool
    """Whether the policy would run this K at this batch size now."""
    itl_correction: float
    """Live factor applied to the profile's step time (1.0: the profile as is)."""


@dataclass(frozen=True)
class PolicyEstimates:
    """The policy's state for telemetry and the operator's live profile status."""

    acceptance: tuple[float, ...]
    """Current a_i per draft position."""
    acceptance_prior: tuple[float, ...]
    acceptance_samples: tuple[float, ...]
    """Decayed number of drafts observed per position (the estimate's evidence)."""
    acceptance_drift: float
    """Log-odds shift of live acceptance from the profile (0: as profiled)."""
    itl_correction: dict[tuple[int, int, int], float]
    """Factor per (bucket's first batch size, last batch size, K), allowed K only."""
    itl_samples: dict[tuple[int, int, int], float]
    global_itl_correction: float
    generation: int
    steps: int
    exploration_steps: int
    switches: int
    current_k: int
