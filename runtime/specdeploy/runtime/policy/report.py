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
    """Live prediction over the profile's for this step (1.0: the profile as is)."""


@dataclass(frozen=True)
class PolicyEstimates:
    """The policy's state for telemetry and the operator's live profile status."""

    acceptance: tuple[float, ...]
    """Current a_i per draft position (a missing draft counts as a rejection)."""
    acceptance_prior: tuple[float, ...]
    acceptance_samples: tuple[float, ...]
    """Decayed number of reached positions observed (the estimate's evidence)."""
    acceptance_drift: float
    """Log-odds shift of live acceptance from the profile (0: as profiled)."""
    drafting_rate: tuple[float, ...]
    """Share of reached positions the drafter proposed (1.0: it always proposes)."""
    proposal_survival: tuple[float, ...]
    """P(proposal length >= i): what prices the verified tokens."""
    cost_scale: dict[tuple[int, int], float]
    """Live scale of the profile's step-cost model per batch-size bucket (first,
    last batch size); 1.0: the profile as is."""
    cost_samples: dict[tuple[int, int], float]
    draft_token_cost_ms: dict[tuple[int, int], float]
    """Live cost of a verified draft token beyond the profile's price, per bucket
    (ms; 0.0: the profile's slope as is)."""
    global_cost_scale: float
    context_cost_ms_per_token: float
    context_per_sequence: float
    throughput: float
    """Observed tokens/s of the system (the throughput objective's lambda)."""
    acceptance_changes: int
    """How often the change test replaced old acceptance evidence."""
    generation: int
    steps: int
    exploration_steps: int
    switches: int
    current_k: int
