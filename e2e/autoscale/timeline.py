"""Draw a load ramp: load on top, what the requests met below, then replicas and K over time.

Why a picture: "the pool grew within its bounds and shrank after the
window" is a claim about timing, which a reader checks by seeing load,
replicas and K on one time axis. The load comes from ``specdeploy load``'s
JSON (its ``timeline.rows``: seconds since the run began); replicas and K
come from Prometheus as (unix time, value) samples, which
``since_start`` moves onto the run's axis.

Panels, top to bottom: the concurrency asked (steps) and output tokens/s
(second axis); the requests that ended per bucket by outcome (stacked: ok,
refused, failed, timed out); then one panel per group of named series,
where a series named ``"replicas: pool-a"`` falls in the group
``replicas``, drawn as steps since both replicas and K change in steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

Series = Mapping[str, Sequence[tuple[float, float]]]
OUTCOME_COLOURS = (
    ("ok", "tab:green"),
    ("refused", "tab:orange"),
    ("failed", "tab:red"),
    ("timed_out", "black"),
)
ROW_KEYS = ("t_s", "concurrency", "output_tokens_per_s", *(name for name, _ in OUTCOME_COLOURS))


def since_start(
    samples: Sequence[tuple[float, float]], started_at_unix: float
) -> list[tuple[float, float]]:
    """Prometheus' (unix seconds, value) samples on the run's axis (seconds since it began)."""
    return [(t - started_at_unix, v) for t, v in samples]


def groups(series: Series) -> dict[str, dict[str, Sequence[tuple[float, float]]]]:
    """The series by group (the text before ``:``; ungrouped ones share one), in given order."""
    out: dict[str, dict[str, Sequence[tuple[float, float]]]] = {}
    for name, points in series.items():
        group, _, label = name.partition(":")
        key, shown = (group.strip(), label.strip()) if label else ("", name)
        out.setdefault(key, {})[shown] = points
    return out


def _check(rows: Sequence[Mapping[str, Any]]) -> None:
    if not rows:
        raise ValueError("no timeline rows to draw")
    missing = sorted(set(ROW_KEYS) - set(rows[0]))
    if missing:
        raise ValueError(f"timeline rows lack {', '.join(missing)}: not specdeploy load's JSON?")


def _load_panel(ax: Axes, rows: Sequence[Mapping[str, Any]], width: float) -> None:
    t = [r["t_s"] for r in rows]
    asked = [r["concurrency"] for r in rows]
    # the last bucket's value holds to its end, not only to its start
    ax.step([*t, t[-1] + width], [*asked, asked[-1]], where="post", color="tab:blue")
    ax.set_ylabel("concurrency asked", color="tab:blue")
    ax.set_ylim(bottom=0)
    rate = ax.twinx()
    mid = [x + width / 2 for x in t]
    rate.plot(mid, [r["output_tokens_per_s"] for r in rows], color="tab:purple", label="tokens/s")
    rate.set_ylabel("output tokens/s", color="tab:purple")
    rate.set_ylim(bottom=0)
    ax.set_title("load")


def _outcome_panel(ax: Axes, rows: Sequence[Mapping[str, Any]], width: float) -> None:
    t = [r["t_s"] for r in rows]
    bottom = [0.0] * len(rows)
    for name, colour in OUTCOME_COLOURS:
        counts = [float(r[name]) for r in rows]
        label = f"{name.replace('_', ' ')} ({int(sum(counts))})"
        ax.bar(t, counts, width=width, bottom=bottom, align="edge", color=colour, label=label)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylim(0, max(max(bottom), 1.0) * 1.35)  # headroom for the legend
    ax.set_ylabel("requests ended")
    ax.set_title("requests by outcome")
    ax.legend(loc="upper right", fontsize="small", ncols=4)


def _series_panel(
    ax: Axes, title: str, series: Mapping[str, Sequence[tuple[float, float]]], end: float
) -> None:
    for label, points in series.items():
        if points:
            xs = [float(x) for x, _ in points]
            ys = [float(y) for _, y in points]
            if xs[-1] < end:  # a scraped value holds until the next scrape: draw it to the end
                xs, ys = [*xs, end], [*ys, ys[-1]]
            ax.step(xs, ys, where="post", label=label)
    ax.set_ylabel(title or "value")
    ax.set_title(title or "series")
    if series:
        ax.legend(loc="upper right", fontsize="small")


def plot_ramp(
    timeline_rows: Sequence[Mapping[str, Any]],
    series: Series,
    out_png: Path,
    *,
    title: str = "load ramp",
) -> list[str]:
    """Draw the ramp into ``out_png``; the panels' titles, top to bottom."""
    _check(timeline_rows)
    width = timeline_rows[1]["t_s"] - timeline_rows[0]["t_s"] if len(timeline_rows) > 1 else 1.0
    grouped = groups(series)
    panels = 2 + len(grouped)
    fig, axes = plt.subplots(
        panels, 1, sharex=True, figsize=(10, 2.4 * panels + 0.6), squeeze=False
    )
    try:
        column = [row[0] for row in axes]
        _load_panel(column[0], timeline_rows, width)
        _outcome_panel(column[1], timeline_rows, width)
        for ax, (group, members) in zip(column[2:], grouped.items(), strict=True):
            _series_panel(ax, group, members, timeline_rows[-1]["t_s"] + width)
        column[-1].set_xlabel("seconds since the load started")
        fig.suptitle(title)
        fig.tight_layout()
        out_png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_png, dpi=100)
        return [ax.get_title() for ax in column]
    finally:
        plt.close(fig)
