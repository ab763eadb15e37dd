"""Smart search vs the exhaustive grid on the ``sim`` backend: every figure is MODELLED.

For each simulator preset and seed, the same profiler (``runtime/profiler``)
runs three times on the same modelled hardware:

* ``exhaustive``: every (batch size, K) cell, each repeated at least 5 times
  (and more until its 95% CI is within 1%): the reference table;
* ``exhaustive-adaptive``: every cell, but repeats stop as soon as the CI is
  within 1% (isolates what the cell pruning alone saves);
* ``smart``: the pruned search (``search.py``): one repeat per explored
  cell, then the contenders of each close call repeated as far as it needs.

Cost is counted in cells, backend runs (``measure`` calls) and simulated
engine seconds (warm-up and prefill included: what the profile would occupy
the GPU for). Goodput lost: the K each table's derived schedule picks, scored
on the exhaustive table's own goodput, as ``1 - goodput(K_smart) /
goodput(K_exhaustive)``, at the profiled batch sizes (max) and at every
integer batch size up to the largest (mean). Targets (issue 3): smart costs
<= 25% of the exhaustive grid's seconds and loses <= 1% goodput.

That scored loss is judged against a noisy reference: the exhaustive table's
own cells carry 3% step jitter, so part of it is the reference's error, not
the search's. Beside it, each table's *true* loss: the K it picks at each
batch size b, scored on the simulator's noise-free truth, as ``1 -
G(b, K_table) / max_K G(b, K)`` where ``G(b, K) = AL(K) / ITL(b, K)`` with
AL from the preset's true per-position acceptance with a missing draft
counted as a rejection (``nominal_rates()``: for bursty n-gram acceptance,
the stationary mixture times the drafting rate) and ITL from the cost model
(``preset.cost.decode_itl`` with a K table set, verifying what the drafter
proposes) at the context a profiling repeat runs at: the profiling prompt
(``profile_cell``'s) plus the prefill's token plus AL(K) per step over a
default repeat (``Sampling().steps``) on average.
That matches a jitter-free ``profile_cell`` within 0.1% (the
``profile_cell``-backed test checks it) and is what both searches estimate,
so the true loss is the table's error against what the profiler estimates,
not the gap between the profiling experiment and serving (whose contexts
are longer). Aggregated like the scored loss: max over the profiled batch
sizes (the headline), mean and max over every integer batch size up to the
largest profiled, then max over seeds per preset. ``exhaustiveTrueLoss``,
the exhaustive table's own true loss, is the floor measurement noise puts
under any measured table. The true loss is reported only: the exit code
still follows the targets above, on the scored loss.

    python bench/profiler_search.py [--out bench/results/profiler_search.json] [--seeds 3]
        [--first-seed 0] [--presets a,b]

``--first-seed`` runs seeds not used while developing the search (a
held-out check: the loss is a worst case over noisy cells, on both sides).

Exits 1 if a target is missed on any preset.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from specdeploy.runtime.goodput import FloatArray, acceptance_lengths, verified_per_sequence
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.profiler.document import build_profile
from specdeploy.runtime.profiler.grid import Grid
from specdeploy.runtime.profiler.sampling import Sampling
from specdeploy.runtime.profiler.search import SearchMode, run_search
from specdeploy.runtime.profiler.sim_backend import SimBackend
from specdeploy.runtime.schedule import (
    IntArray,
    best_k_per_batch_size,
    goodput_grid,
    k_values,
)
from specdeploy.runtime.sim.presets import Preset, get_preset, list_presets

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
COST_TARGET = 0.25
LOSS_TARGET = 0.01
RUNS: dict[str, tuple[SearchMode, Sampling]] = {
    "exhaustive": (SearchMode.EXHAUSTIVE, Sampling(min_repeats=5)),
    "exhaustive-adaptive": (SearchMode.EXHAUSTIVE, Sampling(min_repeats=1)),
    "smart": (SearchMode.SMART, Sampling(min_repeats=1)),
}


@dataclass(frozen=True)
class Run:
    """One profile of one preset: its table and what it cost."""

    profile: SpeculationProfile
    cells: int
    runs: int
    spent_s: float
    measured_s: float


def profile_once(preset_name: str, mode: SearchMode, sampling: Sampling, seed: int) -> Run:
    preset = get_preset(preset_name)
    backend = SimBackend(preset, seed=seed)
    grid = Grid(backend, sampling, max_k=preset.max_k, smallest_batch_size=min(SIZES))
    sizes = run_search(grid, mode, SIZES)
    doc = build_profile(
        grid, fingerprint=backend.fingerprint(), source=backend.source, dataset=preset.dataset
    )
    assert sizes[-1] == max(m.batch_size for m in doc.spec.measurements) or mode is SearchMode.SMART
    return Run(doc, len(grid.cells), grid.calls, backend.spent_seconds, grid.measured_seconds())


def chosen_k(profile: SpeculationProfile, top: int) -> IntArray:
    """The K the profile's derived table picks at each batch size 0..top (index 0 unused)."""
    return best_k_per_batch_size(goodput_grid(profile.spec, top), k_values(profile.spec))


def _aggregate(lost: FloatArray, prefix: str = "") -> dict[str, float]:
    """Losses at batch sizes 1..len(lost): max at the profiled sizes, mean and max overall."""
    at_sizes = [float(lost[bs - 1]) for bs in SIZES if bs <= lost.size]
    keys = ("maxLossAtProfiledSizes", "meanLossAllBatchSizes", "maxLossAllBatchSizes")
    values = (max(at_sizes), float(lost.mean()), float(lost.max()))
    return {
        (prefix + key[0].upper() + key[1:] if prefix else key): v
        for key, v in zip(keys, values, strict=True)
    }


def goodput_loss(reference: SpeculationProfile, candidate: SpeculationProfile) -> dict[str, float]:
    """Goodput lost by the candidate's K choices, scored on the reference's goodput."""
    truth = goodput_grid(reference.spec)
    top = truth.shape[0] - 1
    best_ref = best_k_per_batch_size(truth, k_values(reference.spec))
    cand = chosen_k(candidate, top)
    everywhere = np.arange(1, top + 1)
    lost = 1.0 - truth[everywhere, cand[everywhere]] / truth[everywhere, best_ref[everywhere]]
    return _aggregate(lost)


@cache
def true_goodput_grid(preset_name: str, top: int, steps: int = Sampling().steps) -> FloatArray:
    """Noise-free goodput AL(K) / ITL(b, K), tokens/s per sequence, indexed [b, K].

    Shape (top + 1, maxK + 1), row 0 NaN (indexed by batch size like
    ``goodput_grid``). AL from the preset's true acceptance; ITL from the cost
    model at the mean context of a ``steps``-step profiling repeat (see the
    module docstring). Seed-independent, hence cached per preset.
    """
    preset: Preset = get_preset(preset_name)
    lengths = acceptance_lengths(preset.nominal_rates(), preset.max_k)
    survival = preset.proposal_model.survival(preset.max_k)
    prompt = max(1, round(preset.workload.prompt.mean))  # as profile_cell chooses it
    grid = np.full((top + 1, preset.max_k + 1), np.nan, dtype=np.float64)
    for k in range(preset.max_k + 1):
        context = prompt + 1 + float(lengths[k]) * (steps - 1) / 2.0
        verified = verified_per_sequence(survival, k)
        for bs in range(1, top + 1):
            # profile cells run with a K table set (piecewise graphs), as the vllm backend does
            itl = preset.cost.decode_itl(
                bs, k, context=context, verified_per_sequence=verified, piecewise=True
            )
            grid[bs, k] = float(lengths[k]) / itl
    return grid


def true_loss(truth: FloatArray, chosen: IntArray) -> dict[str, float]:
    """Goodput lost by picking ``chosen[b]`` at each batch size b, under ``truth``.

    ``truth`` is a goodput grid indexed [batch size, K] (row 0 unused), every
    cell known; ``chosen`` is indexed by batch size (index 0 unused) and
    covers at least 1..top. Per batch size, ``1 - truth[b, chosen[b]] /
    max_K truth[b, K]``; aggregated like ``goodput_loss`` (keys prefixed
    ``true``).
    """
    top = truth.shape[0] - 1
    if top < 1 or chosen.size < top + 1:
        raise ValueError(f"need a K per batch size 1..{top}, got {chosen.size - 1}")
    sizes = np.arange(1, top + 1)
    lost = 1.0 - truth[sizes, chosen[sizes]] / truth[sizes].max(axis=1)
    return _aggregate(lost, prefix="true")


def compare(preset: str, seed: int) -> dict[str, Any]:
    runs = {name: profile_once(preset, mode, rule, seed) for name, (mode, rule) in RUNS.items()}
    ref = runs["exhaustive"]
    top = max(m.batch_size for m in ref.profile.spec.measurements)
    truth = true_goodput_grid(preset, top)
    record: dict[str, Any] = {"preset": preset, "seed": seed}
    for name, run in runs.items():
        record[name] = {
            "cells": run.cells,
            "runs": run.runs,
            "simSecondsSpent": round(run.spent_s, 3),
            "simSecondsMeasured": round(run.measured_s, 3),
            "costVsExhaustive": round(run.spent_s / ref.spent_s, 4),
            **{k: round(v, 5) for k, v in goodput_loss(ref.profile, run.profile).items()},
            **{k: round(v, 5) for k, v in true_loss(truth, chosen_k(run.profile, top)).items()},
            "schedule": [list(r) for r in run.profile.spec.schedule or ()],
        }
    smart, adaptive = runs["smart"], runs["exhaustive-adaptive"]
    record["smart"]["costVsExhaustiveAdaptive"] = round(smart.spent_s / adaptive.spent_s, 4)
    return record


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per preset, over seeds: cells (mean), cost ratios and losses (max); targets held?

    ``trueLoss``/``exhaustiveTrueLoss``: the smart/exhaustive table's true loss
    at the profiled sizes (max over seeds). ``targetsMet`` uses the scored
    loss only; ``trueLossWithinTarget`` is reported beside it.
    """
    rows = []
    for preset in sorted({r["preset"] for r in records}):
        mine = [r for r in records if r["preset"] == preset]
        smart = [r["smart"] for r in mine]
        row = {
            "preset": preset,
            "cellsSmart": statistics.mean(s["cells"] for s in smart),
            "cellsExhaustive": mine[0]["exhaustive"]["cells"],
            "costVsExhaustive": max(s["costVsExhaustive"] for s in smart),
            "costVsExhaustiveAdaptive": max(s["costVsExhaustiveAdaptive"] for s in smart),
            "maxLossAtProfiledSizes": max(s["maxLossAtProfiledSizes"] for s in smart),
            "meanLossAllBatchSizes": max(s["meanLossAllBatchSizes"] for s in smart),
            "trueLoss": max(s["trueMaxLossAtProfiledSizes"] for s in smart),
            "trueMeanLossAllBatchSizes": max(s["trueMeanLossAllBatchSizes"] for s in smart),
            "exhaustiveTrueLoss": max(r["exhaustive"]["trueMaxLossAtProfiledSizes"] for r in mine),
            "exhaustiveTrueMeanLossAllBatchSizes": max(
                r["exhaustive"]["trueMeanLossAllBatchSizes"] for r in mine
            ),
        }
        row["targetsMet"] = bool(
            row["costVsExhaustive"] <= COST_TARGET and row["maxLossAtProfiledSizes"] <= LOSS_TARGET
        )
        row["trueLossWithinTarget"] = bool(row["trueLoss"] <= LOSS_TARGET)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/profiler_search.json")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--presets", default=",".join(list_presets()))
    args = parser.parse_args(argv)
    started = time.monotonic()
    records = [
        compare(preset, seed)
        for preset in args.presets.split(",")
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    rows = summarise(records)
    document = {
        "source": "modelled",
        "note": (
            "Simulator (sim backend) figures, not measurements: step times come from the "
            "roofline cost model with 3% log-normal step jitter, acceptance from the presets' "
            "models. Cost = simulated engine seconds incl. warm-up; loss scored on the "
            "exhaustive table's goodput; true loss (trueLoss, exhaustiveTrueLoss) scored on "
            "the noise-free cost model and true acceptance, at the profiling context "
            "(see bench/profiler_search.py)."
        ),
        "batchSizes": list(SIZES),
        "targets": {"costVsExhaustive": COST_TARGET, "maxLoss": LOSS_TARGET},
        "runs": {name: {"search": m.value, **vars(rule)} for name, (m, rule) in RUNS.items()},
        "summary": rows,
        "records": records,
        "wallSeconds": round(time.monotonic() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    for row in rows:
        print(
            f"{row['preset']:<24} cells {row['cellsSmart']:5.1f}/{row['cellsExhaustive']:<3} "
            f"cost {row['costVsExhaustive']:.0%} of exhaustive "
            f"({row['costVsExhaustiveAdaptive']:.0%} of exhaustive-adaptive), "
            f"loss max {row['maxLossAtProfiledSizes']:.2%} "
            f"(true {row['trueLoss']:.2%}, exhaustive's true {row['exhaustiveTrueLoss']:.2%}) "
            f"{'ok' if row['targetsMet'] else 'MISSED'}"
        )
    for row in rows:
        if row["maxLossAtProfiledSizes"] > LOSS_TARGET and row["trueLossWithinTarget"]:
            print(
                f"note: {row['preset']}: scored loss {row['maxLossAtProfiledSizes']:.2%} misses "
                f"the {LOSS_TARGET:.0%} target, but the true (noise-free) loss is "
                f"{row['trueLoss']:.2%}, within it: the scored figure is taken on the exhaustive "
                f"table's noisy goodput (that table's own true loss: "
                f"{row['exhaustiveTrueLoss']:.2%}); the exit code still follows the scored loss"
            )
    print(f"written to {args.out} (modelled)")
    return 0 if all(r["targetsMet"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
