"""From a measured grid to a validated SpeculationProfile with its derived schedule.

Rows are sorted by (batch size, K, context) and K=0 is present at every
batch size (the search guarantees it; ``parse_profile`` checks it); a
(batch size, K) measured at other contexts too (the context axis) has a row
per context. Each row carries
what the cost model needs (``cost.py``): the mean tokens a sequence
verified per step, its mean context, and the cell's drafting rate;
``acceptanceLength`` is the cell's realized tokens per sequence-step.
Acceptance per position is pooled over every cell for positions
1..(largest K measured), with a missing draft counted as a rejection, and
keeps its counts (reached, proposed, accepted), the drafting rate per
position and the proposal survival. The baseline is plain decoding per
batch size, where the backend measured it. The document is re-parsed
before it is returned, so an invalid profile never leaves the profiler.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from specdeploy.runtime.goodput import DraftCounts
from specdeploy.runtime.profile import (
    Acceptance,
    Baseline,
    Fingerprint,
    Measurement,
    Metadata,
    ProfileSpec,
    Source,
    SpeculationProfile,
    parse_profile,
)
from specdeploy.runtime.profiler.grid import Grid, pooled_counts, proposal_survival
from specdeploy.runtime.profiler.sampling import CellStats
from specdeploy.runtime.schedule import derive_schedule

SOURCE_LABEL = "specdeploy.io/source"
SEARCH_ANNOTATION = "specdeploy.io/profile-search"
CELLS_ANNOTATION = "specdeploy.io/profile-cells"


def measurement(stats: CellStats) -> Measurement:
    """One profile row from one cell."""
    al = stats.acceptance_length()
    verified = stats.verified_per_sequence()
    context = stats.context_per_sequence()
    rate = stats.drafting_rate()
    return Measurement(
        batch_size=stats.batch_size,
        k=stats.k,
        itl_ms=round(stats.itl_ms, 4),
        acceptance_length=None if al is None else round(max(al, 1.0), 4),
        samples=stats.samples,
        verified_tokens=None if verified is None else round(max(verified, 1.0), 4),
        context_tokens=None if context is None else round(context, 1),
        drafting_rate=None if rate is None else round(rate, 4),
        itl_half_width_ms=_half_width_ms(stats),
        prompts=len(stats.prompts) or None,
    )


def _half_width_ms(stats: CellStats) -> float | None:
    """The cell's 95% half-width of ``itlMs``; None when it has no finite interval."""
    hw = stats.half_width()
    return round(hw * 1e3, 4) if math.isfinite(hw) else None


def baseline_row(stats: CellStats) -> Baseline:
    """One plain-decoding row from one baseline cell."""
    context = stats.context_per_sequence()
    return Baseline(
        batch_size=stats.batch_size,
        itl_ms=round(stats.itl_ms, 4),
        samples=stats.samples,
        context_tokens=None if context is None else round(context, 1),
        itl_half_width_ms=_half_width_ms(stats),
    )


def acceptance(counts: DraftCounts, survival: Sequence[float], positions: int) -> Acceptance:
    """The pooled acceptance of positions 1..``positions``, with its counts.

    A position never reached has no evidence: its a_i is 0.0 (no reason to
    draft it) and its drafting rate carries the last known one.
    ``survival`` is ``grid.proposal_survival``.
    """
    n = positions
    reached, proposed, accepted = counts.reached[:n], counts.proposed[:n], counts.accepted[:n]
    return Acceptance(
        per_position=tuple(_ratio(accepted, reached, 0.0)),
        samples=reached[0] if reached else 0,
        drafting_rate=tuple(_ratio(proposed, reached, 1.0)),
        proposal_survival=tuple(round(min(max(x, 0.0), 1.0), 4) for x in survival[:n]),
        reached=tuple(reached),
        proposed=tuple(proposed),
        accepted=tuple(accepted),
    )


def _ratio(num: Sequence[int], den: Sequence[int], first: float) -> list[float]:
    """num/den per position, rounded; where den is 0 the previous value (``first`` at 1)."""
    out: list[float] = []
    for n, d in zip(num, den, strict=True):
        out.append(round(n / d, 4) if d else (out[-1] if out else first))
    return out


def provisional_spec(grid: Grid) -> ProfileSpec:
    """The grid as a ProfileSpec, for the search to ask what the schedule would be.

    The fingerprint is a placeholder (only maxK matters to the derivation);
    this spec is never written.
    """
    placeholder = Fingerprint(model="-", method="-", gpu_type="-", max_k=grid.max_k)
    return ProfileSpec(
        fingerprint=placeholder,
        source=Source.MODELLED,
        measurements=tuple(measurement(grid.cells[c]) for c in sorted(grid.cells)),
        acceptance=Acceptance(per_position=tuple(grid.per_position())),
    )


def build_profile(
    grid: Grid,
    *,
    fingerprint: Fingerprint,
    source: Source,
    dataset: str | None,
    name: str | None = None,
    namespace: str | None = None,
    annotations: Mapping[str, str] | None = None,
    max_batch_size: int | None = None,
) -> SpeculationProfile:
    """The validated profile of ``grid`` with ``spec.schedule`` derived.

    ``max_batch_size`` extends the schedule past the largest measured batch
    size (the last K holds there); by default it ends at the largest one.
    """
    if grid.top_k() < 1:
        raise ValueError("no speculative cell measured: a profile needs some K >= 1")
    return profile_from_cells(
        grid.cells.values(),
        grid.baselines.values(),
        contexts=grid.contexts.values(),
        fingerprint=fingerprint,
        source=source,
        dataset=dataset,
        name=name,
        namespace=namespace,
        annotations=annotations,
        max_batch_size=max_batch_size,
    )


def profile_from_cells(
    cells: Iterable[CellStats],
    baselines: Iterable[CellStats],
    *,
    contexts: Iterable[CellStats] = (),
    fingerprint: Fingerprint,
    source: Source,
    dataset: str | None,
    name: str | None = None,
    namespace: str | None = None,
    annotations: Mapping[str, str] | None = None,
    max_batch_size: int | None = None,
) -> SpeculationProfile:
    """The validated profile of measured cells and baselines (``build_profile``'s work, for
    callers without a grid: re-deriving from a raw file).

    ``contexts``: cells at other contexts (the context axis), rows of their own beside
    the ordinary cell of the same (batch size, K); they price context in the cost
    model and stay out of the pooled acceptance (their prompts are not the serving mix).
    """
    stats = sorted(cells, key=lambda c: (c.batch_size, c.k))
    floor = sorted(baselines, key=lambda c: c.batch_size)
    top_k = max((c.k for c in stats), default=0)
    if top_k < 1:
        raise ValueError("no speculative cell measured: a profile needs some K >= 1")
    rows = tuple(
        sorted(
            (measurement(c) for c in [*stats, *contexts]),
            key=lambda m: (m.batch_size, m.k, m.context_tokens or 0.0),
        )
    )
    spec = ProfileSpec(
        fingerprint=fingerprint,
        source=source,
        dataset=dataset,
        measurements=rows,
        acceptance=acceptance(
            pooled_counts(stats, fingerprint.max_k), proposal_survival(stats, top_k), top_k
        ),
        baseline=tuple(baseline_row(b) for b in floor),
    )
    doc = SpeculationProfile(
        metadata=Metadata(
            name=name or fingerprint.profile_name(),
            namespace=namespace,
            labels={SOURCE_LABEL: source.value},
            annotations={CELLS_ANNOTATION: str(len(rows)), **(annotations or {})},
        ),
        spec=spec,
    )
    derived = doc.with_schedule(derive_schedule(doc.spec, max_batch_size))
    return parse_profile(derived.to_document(), source="measured profile")
