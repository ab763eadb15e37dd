"""Ablation of the smart search's issue-13 rules: what each one costs and buys (MODELLED).

Runs ``bench/profiler_search.py`` with some of the rules the profiler gained
in issue 13 switched back to their earlier behaviour, so that their cost
under 3% iid jitter and their benefit under the realistic noise model can
be read on the same seeds:

* ``close-call``: no interleaved repeats of close calls (``CLOSE_CALL_REPEATS`` 1);
* ``reprobe``: no K-1/K+1 probes when settle's leader changes;
* ``ties``: no tie repeats in settle and no tie rule in the schedule;
* ``acceptance``: the acceptance length's error left out of the comparison;
* ``intervals``: a cell's interval from independent steps and the repeats'
  means with z, instead of batch means and t quantiles;
* ``all``: every one of the above.

It patches the modules' attributes in this process only (an ablation
harness, not a configuration the profiler offers). Example, the iid section
with every rule off (about 3 minutes on a quiet box)::

    .venv/bin/python bench/search_ablation.py --off all -- \\
        --out /tmp/a.json --seeds 3 --noise-cvs ''

and the realistic-noise section at CV 0.2 on the held-out seed::

    .venv/bin/python bench/search_ablation.py --off all -- --out /tmp/b.json --seeds 0 \\
        --noise-cvs 0.2 --noise-variants full --noise-seeds 1

Results of this issue's runs are in ``bench/results/search_ablation.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specdeploy.runtime import schedule
from specdeploy.runtime.profiler import sampling, search
from specdeploy.runtime.profiler.grid import Grid

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _no_close_calls() -> None:
    search.CLOSE_CALL_REPEATS = 1  # type: ignore[attr-defined]  # search's binding of sampling's constant


def _no_reprobe() -> None:
    search._probe_neighbours = lambda grid, bs, k: False


def _no_ties() -> None:
    search._tie_target = lambda grid, bs, lead: None
    schedule.break_ties = lambda goodput, relative, best, allowed=None: best


def _no_acceptance_error() -> None:
    def relative_se(grid: Grid, bs: int, k: int) -> float:
        stats = grid.cells[(bs, k)]
        return float(stats.relative_half_width(grid.sampling.z) / grid.sampling.z)

    search.relative_se = relative_se


def _plain_intervals() -> None:
    def half_width(self: sampling.CellStats, z: float = 1.96) -> float:
        if len(self.step_seconds) < 2:
            return math.inf
        steps = z * float(np.std(self.step_seconds, ddof=1)) / math.sqrt(len(self.step_seconds))
        between = 0.0
        if self.repeats >= 2:
            between = z * float(np.std(self.repeat_means, ddof=1)) / math.sqrt(self.repeats)
        return max(steps, between)

    sampling.CellStats.half_width = half_width  # type: ignore[method-assign]


RULES: dict[str, Callable[[], None]] = {
    "close-call": _no_close_calls,
    "reprobe": _no_reprobe,
    "ties": _no_ties,
    "acceptance": _no_acceptance_error,
    "intervals": _plain_intervals,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--off", required=True, help=f"comma-separated rules to switch off: {', '.join(RULES)}, all"
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then profiler_search's flags")
    args = parser.parse_args(argv)
    names = list(RULES) if args.off == "all" else [n.strip() for n in args.off.split(",")]
    unknown = [n for n in names if n not in RULES]
    if unknown:
        parser.error(f"unknown rule(s) {unknown}; known: {', '.join(RULES)}, all")
    for name in names:
        RULES[name]()
    import bench.profiler_search as profiler_search

    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    return int(profiler_search.main(rest))


if __name__ == "__main__":
    sys.exit(main())
