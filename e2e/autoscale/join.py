"""Put a load run and Prometheus' series on one time axis (pure, plus one file read).

The load generator's timeline counts seconds from its own start and says
when that was (``started_at_unix``); Prometheus answers ``query_range`` with
(unix seconds, "value") pairs per label set. ``plot_ramp`` wants both in
seconds since the load started, the series named ``"GROUP: LABEL"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOAD_KIND = "specdeploy-load"
TIMELINE_VERSION = 2
"""The first JSON version of ``specdeploy load`` with a ``timeline``."""


@dataclass(frozen=True)
class LoadTimeline:
    rows: list[dict[str, Any]]
    started_at_unix: float
    bucket_s: float

    @property
    def end_unix(self) -> float:
        """When the last row ends, on the wall clock (the end of a ``query_range``)."""
        return self.started_at_unix + len(self.rows) * self.bucket_s


def read_load(path: Path) -> LoadTimeline:
    """The timeline of a ``specdeploy load --json`` file (ValueError for another file)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("kind") != LOAD_KIND or int(doc.get("version", 0)) < TIMELINE_VERSION:
        raise ValueError(f"{path}: not specdeploy load JSON with a timeline (version >= 2)")
    timeline = doc["timeline"]
    return LoadTimeline(
        list(timeline["rows"]), float(timeline["started_at_unix"]), float(timeline["bucket_s"])
    )


def matrix_series(
    group: str,
    matrix: Sequence[Mapping[str, Any]],
    *,
    label: str,
    started_at_unix: float,
) -> dict[str, list[tuple[float, float]]]:
    """A ``query_range`` result as ``{"GROUP: <label value>": [(seconds since start, v)]}``.

    NaN samples (a ratio over an empty window) are dropped, not drawn as zero.
    """
    out: dict[str, list[tuple[float, float]]] = {}
    for series in matrix:
        name = f"{group}: {series.get('metric', {}).get(label, '?')}"
        points = [(float(t) - started_at_unix, float(v)) for t, v in series.get("values", [])]
        out.setdefault(name, []).extend(p for p in points if not math.isnan(p[1]))
    return out
