"""Charts for ``specdeploy simulate`` documents (matplotlib, headless Agg backend).

Every chart says MODELLED and shows the spread over seeds (error bars from
the per-seed minimum to maximum), so a reader sees which differences are
larger than the seeds' own scatter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

Series = dict[str, tuple[list[float], list[float], list[float], list[float]]]


def plot_document(doc: dict[str, Any], out: Path) -> None:
    """By batch size when every policy ran at the same batch sizes (several); else bars."""
    sizes = {r["batch_size"] for r in doc["results"]}
    per_policy = {r["policy"] for r in doc["results"]}
    by_batch = len(sizes) > 1 and len(doc["results"]) == len(sizes) * len(per_policy)
    fig = _plot_by_batch(doc) if by_batch else _plot_scenario(doc)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _series(doc: dict[str, Any], metric: str) -> Series:
    """policy -> (batch sizes, means, error below, error above) of ``metric``."""
    series: Series = {}
    for r in doc["results"]:
        spread = r["spread"].get(metric)
        if spread is None:
            continue
        xs, ys, lo, hi = series.setdefault(r["policy"], ([], [], [], []))
        xs.append(r["batch_size"])
        ys.append(spread["mean"])
        lo.append(spread["mean"] - spread["min"])
        hi.append(spread["max"] - spread["mean"])
    return series


def _metric(doc: dict[str, Any]) -> str:
    first = doc["results"][0]["spread"]
    return "tokens_per_s_window" if "tokens_per_s_window" in first else "tokens_per_s"


def _plot_by_batch(doc: dict[str, Any]) -> Any:
    metric = _metric(doc)
    series = _series(doc, metric)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    ref_name = "vanilla" if "vanilla" in series else next(iter(series))
    ref = dict(zip(series[ref_name][0], series[ref_name][1], strict=True))
    for name, (xs, ys, lo, hi) in series.items():
        left.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
        right.plot(xs, [y / ref[x] for x, y in zip(xs, ys, strict=True)], marker="o", label=name)
    left.set_ylabel(f"{metric.replace('_', ' ')} (whole replica)")
    left.set_yscale("log")
    right.set_ylabel(f"relative to {ref_name}")
    right.axhline(1.0, color="grey", linewidth=0.8)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (concurrent sequences)")
        ax.grid(alpha=0.3)
    right.legend(title="policy")
    scenario = doc["scenario"]["name"]
    fig.suptitle(
        f"{doc['preset']}, {scenario}: MODELLED by the simulator (not measured), "
        f"seeds {doc['seeds']}\n{doc['description']}"
    )
    return fig


def _plot_scenario(doc: dict[str, Any]) -> Any:
    results = doc["results"]
    names = [f"{r['policy']}@{r['batch_size']:g}" for r in results]
    if len({r["policy"] for r in results}) == len(results):
        names = [r["policy"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    main = "mean_latency_s" if "mean_latency_s" in results[0]["spread"] else "tokens_per_s"
    if "makespan_s" in results[0]["spread"] and main == "tokens_per_s":
        main = "makespan_s"
    spreads = [r["spread"][main] for r in results]
    means = [s["mean"] for s in spreads]
    err = [[m - s["min"] for m, s in zip(means, spreads, strict=True)],
           [s["max"] - m for m, s in zip(means, spreads, strict=True)]]  # fmt: skip
    left.bar(names, means, yerr=err, capsize=4, color="tab:blue")
    left.set_ylabel(f"{main.replace('_', ' ')} (mean, min-max over seeds)")
    right.bar(names, [r["k_changes_per_1000_steps"] for r in results], color="tab:orange")
    right.set_ylabel("K changes per 1000 steps")
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
        ax.tick_params(axis="x", rotation=20)
    s = doc["scenario"]
    fig.suptitle(
        f"{doc['preset']}, scenario {s['name']}: MODELLED by the simulator, seeds {doc['seeds']}"
    )
    return fig
