"""Every panel query of the chart's dashboards, run against a Prometheus over one window.

The e2e test asserts on these results (each query returns series) and
``render`` draws the very same results, so the PNGs show what was checked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from e2e.dashboards import prom
from e2e.dashboards.panels import Board, Panel, Query, Timing, expand, resolve, timing

DEFAULT_SCRAPE_S = 15.0
"""Grafana's default scrape interval for a Prometheus data source (``$__rate_interval``
is four of them at least)."""


@dataclass(frozen=True)
class QueryResult:
    query: Query
    series: list[prom.Series]
    error: str | None = None


@dataclass(frozen=True)
class PanelResult:
    panel: Panel
    results: tuple[QueryResult, ...]
    start: float
    end: float


@dataclass(frozen=True)
class BoardResult:
    board: Board
    variables: Mapping[str, str]
    panels: tuple[PanelResult, ...]


def _run(base: str, query: Query, start: float, end: float, t: Timing) -> QueryResult:
    try:
        if query.instant:
            return QueryResult(query, prom.query(base, query.expr, end))
        return QueryResult(query, prom.query_range(base, query.expr, start, end, t.step))
    except prom.QueryError as err:
        return QueryResult(query, [], str(err))


def collect_board(
    board: Board,
    base: str,
    *,
    window_s: float,
    end: float | None = None,
    scrape_s: float = DEFAULT_SCRAPE_S,
    chosen: Mapping[str, str] | None = None,
) -> BoardResult:
    end = time.time() if end is None else end
    start = end - window_s
    t = timing(window_s, scrape_s)
    variables = resolve(board, base, start, end, chosen)
    panels = tuple(
        PanelResult(
            panel,
            tuple(_run(base, q, start, end, t) for q in expand(panel, variables, t)),
            start,
            end,
        )
        for panel in board.panels
    )
    return BoardResult(board, variables, panels)


def collect(
    boards: Sequence[Board],
    base: str,
    *,
    window_s: float,
    scrape_s: float = DEFAULT_SCRAPE_S,
    chosen: Mapping[str, str] | None = None,
) -> list[BoardResult]:
    """Every board over the same window ending now (``chosen``: as in ``panels.resolve``)."""
    end = time.time()
    return [
        collect_board(b, base, window_s=window_s, end=end, scrape_s=scrape_s, chosen=chosen)
        for b in boards
    ]


def empty(results: Sequence[BoardResult]) -> list[str]:
    """One line per query that failed or returned no series: dashboard, panel, PromQL."""
    problems = []
    for board in results:
        for panel in board.panels:
            for r in panel.results:
                if r.error is None and r.series:
                    continue
                why = r.error or "no series"
                problems.append(
                    f"{board.board.title} / {panel.panel.title} [{r.query.ref}]: {why}\n"
                    f"    {r.query.expr}"
                )
    return problems
