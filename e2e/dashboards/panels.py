"""Each panel of the generated dashboards, with its queries as Grafana would send them.

Grafana fills a query's template variables before Prometheus sees it: the
dashboard's own (``$namespace``, ``$deployment``, ``$pool`` from
``label_values(...)``), and its built-ins ``$__interval`` (the range over
the panel's data points, at least the scrape interval), ``$__rate_interval``
(``max($__interval + scrape, 4 * scrape)``, so a ``rate()`` always spans
enough samples) and ``$__range``. This module does the same from the JSON
the chart ships, so the e2e test runs exactly the PromQL a user's Grafana
would. A multi-value variable set to All becomes the regex alternation of
every value (Grafana's behaviour without a custom all value), each value
regex-escaped as Grafana's Prometheus data source does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.dashboards import prom

CHART_DASHBOARDS = Path(__file__).resolve().parents[2] / "charts" / "specdeploy" / "dashboards"
MAX_DATA_POINTS = 240
"""Points per panel (Grafana derives it from the panel's width in pixels; a grid
cell here is about that)."""
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<match>.*),\s*(?P<label>[a-zA-Z_]\w*)\s*\)\s*$")


@dataclass(frozen=True)
class Query:
    ref: str
    expr: str
    legend: str
    instant: bool
    dashed: bool = False
    """The panel overrides this query's line style to dashed (a reference line)."""


@dataclass(frozen=True)
class Panel:
    """A panel that draws data (rows are left out), its queries still templated."""

    dashboard: str
    id: int
    title: str
    type: str
    unit: str
    grid: tuple[int, int, int, int]
    """x, y, w, h in Grafana's 24-column grid."""
    queries: tuple[Query, ...]
    style: str = "lines"
    """How a time series draws: ``lines``, ``bars`` or ``percent`` (stacked to 100 %)."""
    thresholds: tuple[tuple[float, str], ...] = ()
    """(from value, colour) steps, the first from -inf, when the panel colours by them."""


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    match: str
    multi: bool


@dataclass(frozen=True)
class Board:
    title: str
    uid: str
    variables: tuple[Variable, ...]
    panels: tuple[Panel, ...]
    rows: tuple[tuple[str, int], ...]
    """Row titles and their y."""


@dataclass(frozen=True)
class Timing:
    """The built-in interval variables for one panel's query (seconds)."""

    interval: float
    rate_interval: float
    range: float
    step: float


def timing(window_s: float, scrape_s: float) -> Timing:
    step = max(window_s / MAX_DATA_POINTS, scrape_s)
    return Timing(step, max(step + scrape_s, 4 * scrape_s), window_s, step)


def duration(seconds: float) -> str:
    """A PromQL duration (whole seconds, as Grafana rounds them)."""
    return f"{max(round(seconds), 1)}s"


def _variable(raw: Mapping[str, Any]) -> Variable | None:
    query = raw.get("query")
    found = _LABEL_VALUES.match(query) if isinstance(query, str) else None
    if raw.get("type") != "query" or found is None:
        return None  # the datasource variable: the caller's Prometheus
    return Variable(raw["name"], found["label"], found["match"], bool(raw.get("multi")))


def _dashed_refs(raw: Mapping[str, Any]) -> set[str]:
    """refIds whose series the panel's overrides draw dashed."""
    refs = set()
    for override in (raw.get("fieldConfig") or {}).get("overrides") or ():
        matcher = override.get("matcher") or {}
        for prop in override.get("properties") or ():
            value = prop.get("value")
            dash = prop.get("id") == "custom.lineStyle" and isinstance(value, dict)
            if dash and value.get("fill") == "dash" and matcher.get("id") == "byFrameRefID":
                refs.add(str(matcher.get("options")))
    return refs


def _queries(raw: Mapping[str, Any]) -> tuple[Query, ...]:
    dashed = _dashed_refs(raw)
    return tuple(
        Query(
            t["refId"],
            t["expr"],
            t.get("legendFormat", ""),
            bool(t.get("instant")),
            t["refId"] in dashed,
        )
        for t in raw.get("targets") or ()
        if not t.get("hide")
    )


def _style(custom: Mapping[str, Any]) -> str:
    if (custom.get("stacking") or {}).get("mode") == "percent":
        return "percent"
    return "bars" if custom.get("drawStyle") == "bars" else "lines"


THRESHOLD_COLOURS = {"red": "#f2495c", "green": "#73bf69", "yellow": "#fade2a"}
"""Grafana's named colours, as its dark theme draws them."""


def _thresholds(defaults: Mapping[str, Any]) -> tuple[tuple[float, str], ...]:
    """The panel's threshold steps when it colours by them (None, JSON's -inf, as -inf)."""
    steps = (defaults.get("thresholds") or {}).get("steps") or []
    return tuple(
        (
            -math.inf if step.get("value") is None else float(step["value"]),
            THRESHOLD_COLOURS.get(step["color"], step["color"]),
        )
        for step in steps
    )


def parse(document: Mapping[str, Any]) -> Board:
    """The parts of one dashboard's JSON that decide what Prometheus is asked."""
    variables = [_variable(v) for v in document.get("templating", {}).get("list", [])]
    panels, rows = [], []
    for raw in document.get("panels", []):
        pos = raw["gridPos"]
        if raw["type"] == "row":
            rows.append((raw["title"], int(pos["y"])))
            continue
        defaults = (raw.get("fieldConfig") or {}).get("defaults", {})
        grid = (int(pos["x"]), int(pos["y"]), int(pos["w"]), int(pos["h"]))
        panels.append(
            Panel(
                document["title"],
                raw["id"],
                raw["title"],
                raw["type"],
                defaults.get("unit", ""),
                grid,
                _queries(raw),
                _style(defaults.get("custom") or {}),
                _thresholds(defaults),
            )
        )
    return Board(
        document["title"],
        document["uid"],
        tuple(v for v in variables if v is not None),
        tuple(panels),
        tuple(rows),
    )


def load(directory: Path = CHART_DASHBOARDS) -> list[Board]:
    return [parse(json.loads(p.read_text())) for p in sorted(directory.glob("*.json"))]


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced, longest names first (``$__rate_interval``
    before ``$__range``)."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def builtins(t: Timing) -> dict[str, str]:
    return {
        "__rate_interval": duration(t.rate_interval),
        "__interval": duration(t.interval),
        "__range": duration(t.range),
    }


_REGEX_SPECIAL = re.compile(r"[\\^$.|?*+()\[\]{}]")


def regex_escape(value: str) -> str:
    """A label value as a literal inside a ``=~"..."`` PromQL string: each regex
    metacharacter gets a backslash, itself doubled for the string literal (as
    Grafana's Prometheus data source escapes; ``-`` needs none, and PromQL refuses
    ``\\-`` as an unknown string escape)."""
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def regex_value(values: Sequence[str], multi: bool) -> str:
    """What a variable's ``$name`` becomes in a ``=~`` matcher."""
    escaped = [regex_escape(v) for v in values]
    if not multi or len(escaped) == 1:
        return escaped[0]
    return "(" + "|".join(escaped) + ")"


def resolve(
    board: Board, base: str, start: float, end: float, chosen: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Each variable's substitution, in order (a later one's match uses the earlier ones).

    ``chosen[name]``, when given, is the one value a variable takes (it must be one
    Prometheus lists); otherwise multi-value variables take All and single-value ones
    their first value. A variable with no value raises: its panels could show nothing.
    """
    resolved: dict[str, str] = {}
    for var in board.variables:
        match = substitute(var.match, resolved)
        values = prom.label_values(base, var.label, match, start, end)
        pick = (chosen or {}).get(var.name)
        if pick is not None:
            values = [pick] if pick in values else []
        if not values:
            raise prom.QueryError(
                f"{board.title}: variable ${var.name}: no value{f' {pick!r}' if pick else ''} "
                f"for {match}"
            )
        resolved[var.name] = regex_value(values if var.multi else values[:1], var.multi)
    return resolved


def expand(panel: Panel, variables: Mapping[str, str], t: Timing) -> list[Query]:
    """The panel's queries as Prometheus receives them."""
    values = {**variables, **builtins(t)}
    return [
        Query(q.ref, substitute(q.expr, values), q.legend, q.instant, q.dashed)
        for q in panel.queries
    ]
