"""A profile rebuilt from its raw file under the current definitions, without re-measuring.

Engine time is the expensive part of a profile (GPU hours in a cluster);
the definitions built on it change more often. The raw file keeps every
cell's step times and counts, so ``specdeploy profile --from-raw`` can
re-derive acceptance, the per-cell fields and the schedule whenever the
model changes.

Raw files written since the counts follow the one definition say
``"counts": "reached"`` and carry per cell reached, proposed, accepted,
offered and scheduled per position, the sequence-steps, the tokens
verified and the context read: they are read as they are.

Older raw files (``tests/data/profiles/smollm2-135m-ngram-cpu-2026-11-29.raw.json``)
have per cell ``drafted``/``accepted`` counted only where the drafter
proposed (position i counted when the proposal reached i and positions
< i were accepted) and ``stepSeconds``. From those, exactly:

* every sequence-step of a K >= 1 cell reaches position 1, so reached_1 =
  steps x batch size (the backend kept only steps with the whole batch
  decoding);
* position i > 1 is reached by the sequences that accepted i - 1, so
  reached_i = accepted_{i-1};
* the old ``drafted`` is exactly proposed (reached *and* proposed);
* position 1 is offered where it is proposed (every sequence reaches it),
  and K positions are scheduled per sequence-step.

Not recorded, so *estimated*: how often a proposal reached position i > 1
whatever was accepted (offered_i, hence the verified tokens). The
estimate takes the proposal length independent of acceptance: s_i =
q_1(cell) x prod_{j=2..i} q_j (pooled over cells), q_j = proposed/reached;
the profile's annotation says so. Context was not recorded: no
``contextTokens``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeploy.runtime.profile import Fingerprint, Source, SpeculationProfile
from specdeploy.runtime.profiler.document import profile_from_cells
from specdeploy.runtime.profiler.grid import pooled_counts
from specdeploy.runtime.profiler.sampling import CellStats

REDERIVED_ANNOTATION = "specdeploy.io/rederived-from"
RECONSTRUCTED = (
    "counts reconstructed from conditional-on-proposal drafted/accepted "
    "(reached_1 = steps x batch size, reached_i = accepted_(i-1)); "
    "verifiedTokens estimated from drafting rates"
)


class RawFileError(ValueError):
    """A raw file that cannot be re-derived; the message says which cell and field."""


@dataclass
class Rederived:
    """The cells and baselines of a raw file, and how they were read."""

    cells: list[CellStats]
    baselines: list[CellStats] = field(default_factory=list)
    contexts: list[CellStats] = field(default_factory=list)
    """Cells at other contexts (the context axis)."""
    reconstructed: bool = False
    """Counts reconstructed from an old raw file (module docstring)."""


def read_raw(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise RawFileError(f"{path}: cannot read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise RawFileError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise RawFileError(f"{path}: not a raw measurement file (no 'cells' list)")
    return doc


def cells_of(raw: Mapping[str, Any]) -> Rederived:
    """Every cell (and baseline) of a raw file as pooled stats under the current definitions."""
    if raw.get("counts") == "reached":
        return Rederived(
            [_current_cell(c, i) for i, c in enumerate(raw["cells"])],
            [_current_cell(c, i, "baseline") for i, c in enumerate(raw.get("baseline") or [])],
            [_current_cell(c, i, "contexts") for i, c in enumerate(raw.get("contexts") or [])],
        )
    cells = [_old_cell(c, i) for i, c in enumerate(raw["cells"])]
    _estimate_offered(cells)
    return Rederived(cells, [], reconstructed=True)


def rederive(
    raw: Mapping[str, Any],
    *,
    like: SpeculationProfile | None = None,
    source_name: str = "raw file",
) -> SpeculationProfile:
    """The profile of a raw file; fingerprint, dataset and metadata from the file or ``like``.

    Raw files written before they recorded the fingerprint need ``like``
    (the profile they were made with): its name, labels and annotations
    are kept, and an annotation says the profile was re-derived, and how.
    """
    found = cells_of(raw)
    fingerprint = _fingerprint(raw, like, source_name)
    annotations = dict(like.metadata.annotations or {}) if like is not None else {}
    if "search" in raw:
        annotations.setdefault("specdeploy.io/profile-search", str(raw["search"]))
    note = Path(source_name).name
    annotations[REDERIVED_ANNOTATION] = f"{note}: {RECONSTRUCTED}" if found.reconstructed else note
    dataset = raw.get("dataset") or (like.spec.dataset if like is not None else None)
    source = Source(str(raw.get("source") or (like.spec.source if like else Source.MEASURED)))
    return profile_from_cells(
        found.cells,
        found.baselines,
        contexts=found.contexts,
        fingerprint=fingerprint,
        source=source,
        dataset=dataset,
        name=like.metadata.name if like is not None else None,
        namespace=like.metadata.namespace if like is not None else None,
        annotations=annotations,
    )


# --- the two file generations ---------------------------------------------------


def _current_cell(cell: Mapping[str, Any], i: int, where: str = "cells") -> CellStats:
    at = f"{where}[{i}]"
    stats = _timed(cell, at)
    stats.drafted = _counts(cell, "reached", at)
    stats.accepted = _counts(cell, "accepted", at)
    for name in ("proposed", "offered", "scheduled"):
        if cell.get(name) is not None:
            setattr(stats, name, _counts(cell, name, at))
    for name, key in (
        ("sequence_steps", "sequenceSteps"),
        ("verified_tokens", "verifiedTokens"),
        ("context_tokens", "contextTokens"),
    ):
        if cell.get(key) is not None:
            setattr(stats, name, _count(cell[key], f"{at}.{key}"))
    return stats


def _old_cell(cell: Mapping[str, Any], i: int) -> CellStats:
    """A cell of a raw file that predates the reached counts (module docstring)."""
    at = f"cells[{i}]"
    stats = _timed(cell, at)
    k = stats.k
    n = stats.batch_size * stats.samples
    stats.sequence_steps = n
    if k == 0:
        stats.verified_tokens = n
        return stats
    proposed = _padded(_counts(cell, "drafted", at), k)
    accepted = _padded(_counts(cell, "accepted", at), k)
    reached = [n, *accepted[: k - 1]]
    for j in range(k):
        if not accepted[j] <= proposed[j] <= reached[j]:
            raise RawFileError(
                f"{at}: position {j + 1}: need accepted <= drafted <= reached "
                f"({accepted[j]} <= {proposed[j]} <= {reached[j]})"
            )
    stats.drafted, stats.proposed, stats.accepted = reached, proposed, accepted
    stats.scheduled = [n] * k
    return stats


def _estimate_offered(cells: Sequence[CellStats]) -> None:
    """offered_i and verified tokens of reconstructed cells (module docstring's estimate)."""
    max_k = max((c.k for c in cells), default=0)
    pooled = pooled_counts(cells, max_k)
    q = [p / r if r else 1.0 for p, r in zip(pooled.proposed, pooled.reached, strict=True)]
    for stats in cells:
        if stats.k == 0:
            continue
        n = stats.seq_steps
        assert stats.proposed is not None
        survival = stats.proposed[0] / n if n else 0.0
        offered = []
        for j in range(stats.k):
            if j:
                survival *= q[j]
            offered.append(stats.proposed[0] if j == 0 else round(n * survival))
        stats.offered = offered
        stats.verified_tokens = n + sum(offered)


def _timed(cell: Mapping[str, Any], at: str) -> CellStats:
    try:
        bs, k = int(cell["batchSize"]), int(cell["k"])
        seconds = [float(t) for t in cell["stepSeconds"]]
    except (KeyError, TypeError, ValueError) as err:
        raise RawFileError(f"{at}: needs batchSize, k and stepSeconds: {err}") from None
    if bs < 1 or k < 0 or not seconds or any(not math.isfinite(t) or t <= 0 for t in seconds):
        raise RawFileError(f"{at}: batchSize >= 1, k >= 0 and positive step times needed")
    means = cell.get("repeatMeans") or [sum(seconds) / len(seconds)]
    lengths = [int(n) for n in cell.get("repeatSteps") or []]
    first = [(int(r), int(a)) for r, a in cell.get("repeatFirstPosition") or []]
    return CellStats(
        bs, k, step_seconds=seconds, repeat_means=[float(m) for m in means],
        repeat_steps=lengths, repeat_first=first, prompts=set(cell.get("prompts") or []),
    )  # fmt: skip


def _counts(cell: Mapping[str, Any], name: str, at: str) -> list[int]:
    values = cell.get(name)
    if not isinstance(values, list):
        raise RawFileError(f"{at}.{name}: expected a list of counts")
    return [_count(v, f"{at}.{name}") for v in values]


def _count(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise RawFileError(f"{at}: expected a count >= 0, got {value!r}")
    if int(value) != value:
        raise RawFileError(f"{at}: expected a whole count, got {value!r}")
    return int(value)


def _padded(values: list[int], k: int) -> list[int]:
    return (values + [0] * k)[:k]


def _fingerprint(
    raw: Mapping[str, Any], like: SpeculationProfile | None, source_name: str
) -> Fingerprint:
    if raw.get("fingerprint"):
        return Fingerprint.model_validate(raw["fingerprint"])
    if like is None:
        raise RawFileError(
            f"{source_name}: records no fingerprint (written before it did): pass the "
            "profile it was made with (--like PROFILE, or an existing --out)"
        )
    return like.spec.fingerprint
