"""Draw the chart's dashboards from a live Prometheus, one PNG per dashboard.

No Grafana server can be had here (``shared/reviews/testbed.md``), so this
is what a user sees before installing: each dashboard laid out on Grafana's
24-column grid (``gridPos``), each panel drawn with matplotlib (Agg) from
the same ``query_range`` results the e2e test asserts on, with its title,
unit and legend, and the template variables it was drawn for in the header.

Usage: ``python -m e2e.dashboards.render --prometheus URL --out DIR [--window S]``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from e2e.dashboards import panels, prom
from e2e.dashboards.results import (
    DEFAULT_SCRAPE_S,
    BoardResult,
    PanelResult,
    collect,
)

BACKGROUND, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
PALETTE = [
    "#73bf69",
    "#f2cc0c",
    "#8ab8ff",
    "#ff780a",
    "#f2495c",
    "#5794f2",
    "#b877d9",
    "#fade2a",
    "#37872d",
    "#c4162a",
]
WIDTH_IN = 22.0
COLUMN_IN = WIDTH_IN / 24
ROW_IN = COLUMN_IN * 0.42
"""A grid unit's height: Grafana's 30 px against a column of about 72 px."""
HEADER_IN = 0.9
_TEMPLATE = re.compile(r"\{\{\s*([a-zA-Z_]\w*)\s*\}\}")


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format filled from a series' labels."""
    if not template:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return _TEMPLATE.sub(lambda m: labels.get(m.group(1), ""), template)


def unit_format(unit: str, value: float) -> str:
    """A tick label in the panel's unit (the ones the dashboards use)."""
    if unit == "percentunit":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    if unit.startswith("suffix:"):
        return f"{value:.3g}{unit.split(':', 1)[1].strip()}"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    return f"{value:.3g}{suffix}"


@dataclass(frozen=True)
class Line:
    """One series as drawn: its legend, its samples (NaN-free) and its line style."""

    name: str
    times: list[float]
    values: list[float]
    dashed: bool = False


def _series(result: PanelResult) -> list[Line]:
    """Every series of every query of the panel."""
    out = []
    for r in result.results:
        for s in r.series:
            points = [(float(t), float(v)) for t, v in s.get("values", [])]
            points = [(t, v) for t, v in points if math.isfinite(v)]
            if points:
                times, values = zip(*points, strict=True)
                name = legend(r.query.legend, s["metric"])
                out.append(Line(name, list(times), list(values), r.query.dashed))
    return out


def _clock(value: float, _pos: object) -> str:
    """An x tick (Unix seconds) as UTC clock time, as Grafana's time axis reads."""
    return datetime.fromtimestamp(value, UTC).strftime("%H:%M:%S")


def _style_axes(ax: Axes, unit: str) -> None:
    ax.set_facecolor(PANEL)
    ax.tick_params(colors=TEXT, labelsize=7)
    for spine in ax.spines.values():
        spine.set_color(GRID)
    ax.grid(True, color=GRID, linewidth=0.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: unit_format(unit, v)))
    ax.xaxis.set_major_formatter(FuncFormatter(_clock))


def _no_data(ax: Axes, why: str) -> None:
    ax.text(0.5, 0.5, why, color="#f2495c", ha="center", va="center", transform=ax.transAxes)


def _draw_lines(ax: Axes, result: PanelResult) -> None:
    ax.set_xlim(result.start, result.end)
    series = _series(result)
    if not series:
        _no_data(ax, "No data")
        return
    style = result.panel.style
    if style == "percent":
        _draw_percent(ax, series)
    else:
        for i, line in enumerate(series):
            color = PALETTE[i % len(PALETTE)]
            if style == "bars":
                width = 0.8 * _bar_width(line.times)
                ax.bar(line.times, line.values, width=width, color=color, label=line.name)
            else:
                dash = "--" if line.dashed else "-"
                ax.plot(line.times, line.values, dash, color=color, linewidth=1.2, label=line.name)
    if style == "bars" and not any(v for line in series for v in line.values):
        ax.set_ylim(0, 1)  # all zero (no errors): a baseline at the bottom, as Grafana draws it
    _draw_thresholds(ax, result.panel.thresholds)
    ax.legend(
        loc="upper left",
        fontsize=6,
        facecolor=PANEL,
        labelcolor=TEXT,
        framealpha=0.6,
        edgecolor=GRID,
        ncols=2 if len(series) > 4 else 1,
    )


def _draw_thresholds(ax: Axes, steps: Sequence[tuple[float, str]]) -> None:
    """Grafana's ``line+area`` threshold style: each step's band shaded, its edge a line."""
    if not steps:
        return
    low, high = ax.get_ylim()
    margin = 0.05 * (high - low or 1.0)
    low, high = low - margin, high + margin
    for (start, colour), (end, _) in itertools.pairwise([*steps, (math.inf, "")]):
        if max(start, low) < min(end, high):
            ax.axhspan(max(start, low), min(end, high), color=colour, alpha=0.08, linewidth=0)
        if low < start < high:
            ax.axhline(start, color=colour, linewidth=0.8, alpha=0.8)
    ax.set_ylim(low, high)


def threshold_colour(steps: Sequence[tuple[float, str]], value: float) -> str | None:
    """The colour of the last step at or below ``value`` (None: the panel has no steps)."""
    found = None
    for start, colour in steps:
        if value >= start:
            found = colour
    return found


def _bar_width(times: Sequence[float]) -> float:
    return min((b - a for a, b in itertools.pairwise(times)), default=10.0)


def _draw_percent(ax: Axes, series: list[Line]) -> None:
    """Stacked to 100 % at each time every series has a sample."""
    grid = sorted(set.intersection(*(set(line.times) for line in series)))
    if not grid:
        grid = sorted({t for line in series for t in line.times})
    rows = [dict(zip(line.times, line.values, strict=True)) for line in series]
    stacks = [[row.get(t, 0.0) for t in grid] for row in rows]
    totals = [sum(col) or 1.0 for col in zip(*stacks, strict=True)]
    shares = [[v / tot for v, tot in zip(s, totals, strict=True)] for s in stacks]
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    ax.stackplot(grid, shares, labels=[line.name for line in series], colors=colors, alpha=0.8)
    ax.set_ylim(0, 1)


def _draw_stat(ax: Axes, result: PanelResult) -> None:
    series = _series(result)
    if not series:
        _no_data(ax, "No data")
        return
    for i, line in enumerate(series):
        ax.fill_between(line.times, line.values, color=PALETTE[i % len(PALETTE)], alpha=0.25)
    ax.set_xticks([])
    ax.set_yticks([])
    unit, steps = result.panel.unit, result.panel.thresholds
    for i, line in enumerate(series):
        ax.text(
            0.5,
            0.5 + 0.18 * ((len(series) - 1) / 2 - i),
            f"{unit_format(unit, line.values[-1])}   {line.name}",
            color=threshold_colour(steps, line.values[-1]) or PALETTE[0],
            ha="center",
            va="center",
            fontsize=12,
            weight="bold",
            transform=ax.transAxes,
        )


def _draw_table(ax: Axes, result: PanelResult) -> None:
    rows = [
        (legend(r.query.legend, s["metric"]), s["metric"], s.get("value", [0, "nan"])[1])
        for r in result.results
        for s in r.series
    ]
    ax.set_xticks([])
    ax.set_yticks([])
    if not rows:
        _no_data(ax, "No data")
        return
    shown = ("policy", "profile", "digest")
    lines = [" | ".join([name, *(labels.get(k, "-") for k in shown)]) for name, labels, _v in rows]
    header = " | ".join(["pool", *shown])
    ax.text(
        0.02,
        0.95,
        "\n".join([header, *lines]),
        color=TEXT,
        ha="left",
        va="top",
        fontsize=7,
        family="monospace",
        transform=ax.transAxes,
    )


def _draw_panel(fig: Figure, result: PanelResult, height_units: int) -> None:
    x, y, w, h = result.panel.grid
    total_h = HEADER_IN + height_units * ROW_IN
    left, width = (x * COLUMN_IN + 0.45) / WIDTH_IN, (w * COLUMN_IN - 0.6) / WIDTH_IN
    bottom = 1 - (HEADER_IN + (y + h) * ROW_IN - 0.3) / total_h
    height = (h * ROW_IN - 0.62) / total_h
    ax = fig.add_axes((left, bottom, width, height))
    _style_axes(ax, result.panel.unit)
    ax.set_title(result.panel.title, color=TEXT, fontsize=9, loc="left")
    errors = [r.error for r in result.results if r.error]
    if errors:
        _no_data(ax, "Query error:\n" + errors[0][:120])
    elif result.panel.type == "stat":
        _draw_stat(ax, result)
    elif result.panel.type == "table":
        _draw_table(ax, result)
    else:
        _draw_lines(ax, result)


def draw(board: BoardResult, path: Path) -> Path:
    """One dashboard as one PNG; rows as headings, panels where Grafana puts them."""
    height_units = max((p.grid[1] + p.grid[3] for p in board.board.panels), default=1)
    total_h = HEADER_IN + height_units * ROW_IN
    fig = plt.figure(figsize=(WIDTH_IN, total_h), facecolor=BACKGROUND)
    try:
        shown = ", ".join(f"{k}={_plain(v)}" for k, v in board.variables.items())
        fig.text(
            0.01,
            1 - 0.35 / total_h,
            board.board.title,
            color=TEXT,
            fontsize=15,
            weight="bold",
            va="top",
        )
        fig.text(0.01, 1 - 0.7 / total_h, shown, color="#8e8e8e", fontsize=8, va="top")
        for title, y in board.board.rows:
            fig.text(
                0.01,
                1 - (HEADER_IN + (y + 0.8) * ROW_IN) / total_h,
                title,
                color=TEXT,
                fontsize=11,
                weight="bold",
            )
        for result in board.panels:
            _draw_panel(fig, result, height_units)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=80, facecolor=BACKGROUND)
    finally:
        plt.close(fig)
    return path


def _plain(regex: str) -> str:
    """A substituted variable as a person reads it (regex escapes and groups removed)."""
    return re.sub(r"\\+(.)", r"\1", regex).strip("()").replace("|", " | ")


def render_results(results: Sequence[BoardResult], out_dir: Path) -> list[Path]:
    return [draw(r, out_dir / f"{r.board.uid}.png") for r in results]


def render_dashboards(
    prometheus_url: str,
    out_dir: Path,
    *,
    window_s: float = 600,
    scrape_s: float = DEFAULT_SCRAPE_S,
    dashboards: Path = panels.CHART_DASHBOARDS,
) -> list[Path]:
    """Query every panel of the chart's dashboards over the last ``window_s`` and draw
    each dashboard as one PNG under ``out_dir``; the PNGs' paths."""
    results = collect(panels.load(dashboards), prometheus_url, window_s=window_s, scrape_s=scrape_s)
    return render_results(results, out_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.dashboards.render")
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNGs")
    parser.add_argument("--window", type=float, default=600, help="seconds back from now")
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=DEFAULT_SCRAPE_S,
        help="the data source's scrape interval (for $__rate_interval)",
    )
    args = parser.parse_args(argv)
    try:
        paths = render_dashboards(
            args.prometheus, args.out, window_s=args.window, scrape_s=args.scrape_interval
        )
    except prom.QueryError as err:
        print(f"render: {err}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
