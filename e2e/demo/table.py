"""The fleet's status as a ``kubectl get sdep``-style table, one row per pool. Pure.

The columns join two sources the way an operator on call would: the
SpeculativeDeployment's status (phase, pool state, replicas, the live floor's
decoding mode and its last R, the table in force) and Prometheus (the K the
add-ons chose last, acceptance over the last window, tokens per second served
and the policy's predicted goodput).
Prometheus series are keyed by the ``specdeploy_pool`` target label, which is
the pool's ``specdeploy.io/pool`` pod label: the GPU type as a label value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdeploy.operator.naming import label_value

Samples = Mapping[str, Mapping[str, float]]
"""Query name (``QUERIES``' keys) -> pool label value -> value."""
RATE_WINDOW = "30s"
QUERIES: Mapping[str, str] = {
    "k": 'avg by (specdeploy_pool) (specdeploy_k{job="specdeploy-addon"})',
    "acceptance": (
        f"sum by (specdeploy_pool) (rate(specdeploy_accepted_tokens_total[{RATE_WINDOW}]))"
        f" / sum by (specdeploy_pool) (rate(specdeploy_draft_tokens_total[{RATE_WINDOW}]))"
    ),
    "tokens": f"sum by (specdeploy_pool) (rate(vllm:generation_tokens_total[{RATE_WINDOW}]))",
    "predicted": (
        "sum by (specdeploy_pool) (specdeploy_predicted_goodput_tokens_per_second"
        '{job="specdeploy-addon"})'
    ),
}
COLUMNS = (
    "NAME",
    "PHASE",
    "POOL",
    "STATE",
    "READY",
    "DECODING",
    "R",
    "K",
    "TABLE",
    "ACCEPT",
    "TOK/S",
    "PRED",
)


@dataclass(frozen=True)
class PoolRow:
    """One pool of one SpeculativeDeployment, as the table shows it."""

    name: str
    phase: str
    gpu: str
    state: str
    ready: str
    decoding: str
    """``speculating`` | ``spec+reference`` (a plain reference replica beside it) |
    ``plain+canary`` (the live floor's state) | ``-`` (not judged yet)."""
    ratio: str
    """The live floor's last R with its 95% bounds (the canary's while plain)."""
    k: float | None
    table: str
    acceptance: float | None
    tokens_per_s: float | None
    predicted: float | None

    def cells(self) -> tuple[str, ...]:
        return (
            self.name,
            self.phase,
            self.gpu,
            self.state,
            self.ready,
            self.decoding,
            self.ratio,
            _number(self.k, "{:.1f}"),
            self.table or "-",
            _number(self.acceptance, "{:.2f}"),
            _number(self.tokens_per_s, "{:.0f}"),
            _number(self.predicted, "{:.0f}"),
        )


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def floor_cells(floor: Mapping[str, Any]) -> tuple[str, str]:
    """The DECODING and R cells from a pool's ``status.pools[].floor``."""
    state = floor.get("state")
    decoding = {"plain": "plain+canary", "speculating": "speculating"}.get(str(state), "-")
    if decoding == "speculating" and floor.get("referenceSince"):
        decoding = "spec+reference"  # R undecided: a plain reference replica measures beside
    ratio, low, high = (floor.get(k) for k in ("ratio", "ratioLow", "ratioHigh"))
    if ratio is None:
        return decoding, "-"
    shown = f"{ratio:.2f}"
    if low is not None and high is not None:
        shown += f" [{low:.2f},{high:.2f}]"
    return decoding, shown


def pool_rows(sdep: Mapping[str, Any], samples: Samples) -> list[PoolRow]:
    """The rows of one SpeculativeDeployment (one per pool in its status)."""
    status = sdep.get("status") or {}
    name = sdep["metadata"]["name"]
    rows = []
    for pool in status.get("pools") or []:
        key = label_value(pool["gpuType"])
        live = pool.get("live") or {}
        decoding, ratio = floor_cells(pool.get("floor") or {})
        rows.append(
            PoolRow(
                name=name,
                phase=status.get("phase", "Pending"),
                gpu=pool["gpuType"],
                state=pool.get("state", ""),
                ready=f"{pool.get('readyReplicas', 0)}/{pool.get('replicas', 0)}",
                decoding=decoding,
                ratio=ratio,
                k=samples.get("k", {}).get(key),
                table=live.get("schedule") or pool.get("schedule") or "",
                acceptance=samples.get("acceptance", {}).get(key),
                tokens_per_s=samples.get("tokens", {}).get(key),
                predicted=samples.get("predicted", {}).get(key),
            )
        )
    if not rows:
        rows.append(
            PoolRow(
                name,
                status.get("phase", "Pending"),
                "-",
                "",
                "",
                "-",
                "-",
                None,
                "",
                None,
                None,
                None,
            )
        )
    return rows


LIVE_COLUMNS = ("R", "ACCEPT", "TOK/S", "PRED")
"""Columns that move with every scrape; a change in the others is news at once."""


def shape(rows: list[PoolRow]) -> tuple[tuple[str, ...], ...]:
    """The rows without their live numbers: what makes a change worth printing at once."""
    keep = [i for i, name in enumerate(COLUMNS) if name not in LIVE_COLUMNS]
    return tuple(tuple(row.cells()[i] for i in keep) for row in rows)


def render(rows: list[PoolRow]) -> str:
    """Left-aligned columns, three spaces apart, as kubectl prints them."""
    table = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def by_pool(series: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """An instant query's vector as pool label value -> value (NaN and +Inf dropped)."""
    out = {}
    for item in series:
        value = float(item["value"][1])
        pool = item.get("metric", {}).get("specdeploy_pool")
        if pool and value == value and abs(value) != float("inf"):
            out[pool] = value
    return out
