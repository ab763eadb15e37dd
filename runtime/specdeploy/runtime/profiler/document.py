"""From a measured grid to a validated SpeculationProfile with its derived schedule.

Rows are sorted by (batch size, K) and K=0 is present at every batch size
(the search guarantees it; ``parse_profile`` checks it). Acceptance per
position is pooled over every cell from the conditional counts, for
positions 1..(largest K measured): a position never drafted has no evidence
and is not claimed. The document is re-parsed before it is returned, so an
invalid profile never leaves the profiler.
"""

from __future__ import annotations

from collections.abc import Mapping

from specdeploy.runtime.profile import (
    Acceptance,
    Fingerprint,
    Measurement,
    Metadata,
    ProfileSpec,
    Source,
    SpeculationProfile,
    parse_profile,
)
from specdeploy.runtime.profiler.grid import Grid
from specdeploy.runtime.profiler.sampling import CellStats
from specdeploy.runtime.schedule import derive_schedule

SOURCE_LABEL = "specdeploy.io/source"
SEARCH_ANNOTATION = "specdeploy.io/profile-search"
CELLS_ANNOTATION = "specdeploy.io/profile-cells"


def measurement(stats: CellStats) -> Measurement:
    """One profile row from one cell."""
    al = stats.acceptance_length()
    return Measurement(
        batch_size=stats.batch_size,
        k=stats.k,
        itl_ms=round(stats.itl_ms, 4),
        acceptance_length=None if al is None else round(max(al, 1.0), 4),
        samples=stats.samples,
    )


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
    drafted, _ = grid.draft_counts()
    rows = tuple(measurement(grid.cells[c]) for c in sorted(grid.cells))
    spec = ProfileSpec(
        fingerprint=fingerprint,
        source=source,
        dataset=dataset,
        measurements=rows,
        acceptance=Acceptance(
            per_position=tuple(round(r, 4) for r in grid.per_position(grid.top_k())),
            samples=drafted[0],
        ),
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
