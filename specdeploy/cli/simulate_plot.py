"""Charts for ``specdeploy simulate`` documents (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_document(doc: dict[str, Any], out: Path) -> None:
    """Steady scenario: tokens/s and ratio to vanilla per batch size; else bars."""
    fig = _plot_steady(doc) if doc["scenario"]["name"] == "steady" else _plot_scenario(doc)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _series(doc: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in doc["results"]:
        xs, ys = series.setdefault(r["policy"], ([], []))
        xs.append(r["batch_size"])
        ys.append(r["tokens_per_s"])
    return series


def _plot_steady(doc: dict[str, Any]) -> Any:
    series = _series(doc)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    base = dict(zip(*series["vanilla"], strict=True)) if "vanilla" in series else None
    for name, (xs, ys) in series.items():
        left.plot(xs, ys, marker="o", label=name)
        if base:
            right.plot(
                xs, [y / base[x] for x, y in zip(xs, ys, strict=True)], marker="o", label=name
            )
    left.set_ylabel("tokens/s (whole replica)")
    left.set_yscale("log")
    right.set_ylabel("throughput relative to vanilla")
    right.axhline(1.0, color="grey", linewidth=0.8)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (concurrent sequences)")
        ax.grid(alpha=0.3)
    right.legend(title="policy")
    fig.suptitle(f"{doc['preset']}: MODELLED by the simulator (not measured)\n{doc['description']}")
    return fig


def _plot_scenario(doc: dict[str, Any]) -> Any:
    results = doc["results"]
    names = [r["policy"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    left.bar(names, [r["tokens_per_s"] for r in results], color="tab:blue")
    left.set_ylabel("tokens/s over the run")
    right.bar(names, [r["k_changes_per_1000_steps"] for r in results], color="tab:orange")
    right.set_ylabel("K changes per 1000 steps")
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
        ax.tick_params(axis="x", rotation=20)
    s = doc["scenario"]
    fig.suptitle(f"{doc['preset']}, scenario {s['name']}: MODELLED by the simulator")
    return fig
