"""What one interval's PromQL says about one pool, and what the loop hands a deployment.

Counts are ``increase()`` over the window, summed over the pool's pods, so
they are floats (Prometheus extrapolates to the window's edges); positions
are 1-based on the wire and 0-based here. Pure values, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

PoolKey = tuple[str, str, str]
"""(namespace, deployment label value, pool label value): the scrape labels'
``namespace``, ``specdeploy_deployment`` and ``specdeploy_pool``."""
Cell = tuple[str, int]
"""(batch bucket label as the add-on writes it: "1", "2", "3-4", ...; K)."""


@dataclass(frozen=True)
class StepTimes:
    """Clean decode steps of one (batch bucket, K) cell: summed seconds and their count."""

    seconds: float
    count: float

    @property
    def mean_ms(self) -> float:
        return 1000.0 * self.seconds / self.count if self.count > 0 else float("nan")


@dataclass(frozen=True)
class PoolWindow:
    """One pool over one window: the counters' increases and the newest sample's age."""

    window_seconds: float
    reached: tuple[float, ...] = ()
    proposed: tuple[float, ...] = ()
    accepted: tuple[float, ...] = ()
    verified_tokens: float = 0.0
    sequence_steps: float = 0.0
    step_times: Mapping[Cell, StepTimes] = field(default_factory=dict)
    step_batch_sizes: Mapping[Cell, float] = field(default_factory=dict)
    """The batch sizes of each cell's clean steps, summed (over its ``step_times`` count: the
    cell's mean batch size); empty from pods that predate the series."""
    steps_by_k: Mapping[int, float] = field(default_factory=dict)
    k0_passes: Mapping[str, StepTimes] = field(default_factory=dict)
    """The drafter's K=0 passes per batch bucket label (stateful drafters' pods only,
    ``vllm_addon.k0_pass``): what a clean K=0 step spends beyond a plain step."""
    requests_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    """vLLM's output tokens/s over the window, summed over the pool's pods (its served demand)."""
    tpot: StepTimes | None = None
    """vLLM's time per output token of the requests the pool's pods finished in the window
    (``vllm:request_time_per_output_token_seconds``: summed seconds, requests), the plain
    reference apart (None: no request finished, or an engine that does not export it)."""
    reference_tpot: StepTimes | None = None
    """The same of the live floor's plain reference replica (``builders.common.REFERENCE_LABEL``):
    plain decoding beside the speculating pods, under the same traffic."""
    waiting_requests: float | None = None
    """Requests queued for a batch slot now, summed over the pods (demand not yet served)."""
    age_seconds: float | None = None
    """Seconds since the pool's newest add-on sample (None: no sample at all)."""

    @property
    def verified_per_sequence(self) -> float | None:
        if self.sequence_steps <= 0:
            return None
        return self.verified_tokens / self.sequence_steps


class FetchProblem(StrEnum):
    """Why no window came back for anything (the condition reasons)."""

    UNREACHABLE = "PrometheusUnreachable"
    BAD_RESPONSE = "PrometheusBadResponse"


@dataclass(frozen=True)
class TelemetryReport:
    """One interval for one deployment: its pools' windows by pool label, or why none.

    ``problem`` set: Prometheus could not be asked or answered nonsense, and
    ``windows`` is empty. A pool absent from ``windows`` had no series.
    """

    url: str
    window_seconds: float
    windows: Mapping[str, PoolWindow] = field(default_factory=dict)
    problem: FetchProblem | None = None
    detail: str = ""
