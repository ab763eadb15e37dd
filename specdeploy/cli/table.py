"""``specdeploy table``: derive, show and convert the K table of a SpeculationProfile.

* ``derive FILE``: the same document with ``spec.schedule`` computed from the
  measurements, on stdout, ready to apply or commit.
* ``show FILE [--plot OUT.png]``: step time and goodput per (batch size, K),
  the best K and the schedule, for a human deciding whether to trust it.
* ``to-vllm FILE``: the JSON value of vLLM's
  ``num_speculative_tokens_per_batch_size``.

An invalid file exits with 2 and prints every problem on stderr, one per
line, each naming its field; stdout stays empty so a pipeline
(``specdeploy table derive p.yaml > p2.yaml``) never writes half a document.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specdeploy.cli.plots import missing_plots
from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.profile import (
    ProfileError,
    Source,
    SpeculationProfile,
    dump_profile,
    load_profile,
)
from specdeploy.runtime.ranges import compress, format_schedule, to_vllm
from specdeploy.runtime.schedule import (
    best_k_per_batch_size,
    derive_schedule,
    goodput_grid,
    itl_grid,
    k_values,
)

EXIT_INVALID = 2


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: Any) -> None:
    """Add ``table`` and its sub-commands to the top-level parser."""
    table = subparsers.add_parser("table", help="derive, show and convert K tables")
    sub = table.add_subparsers(dest="table_command", metavar="SUBCOMMAND", required=True)

    derive = sub.add_parser("derive", help="print the profile with spec.schedule computed")
    derive.add_argument("file", type=Path, help="SpeculationProfile (YAML or JSON)")
    derive.add_argument("--format", choices=("yaml", "json"), default="yaml")
    derive.add_argument(
        "--max-batch-size", type=_positive_int, help="last batch size of the schedule"
    )
    derive.set_defaults(handler=run_derive)

    show = sub.add_parser("show", help="print ITL, goodput and best K per batch size")
    show.add_argument("file", type=Path, help="SpeculationProfile (YAML or JSON)")
    show.add_argument("--plot", type=Path, metavar="OUT.png", help="also draw goodput vs batch")
    show.add_argument("--max-batch-size", type=_positive_int, help="extend or cut the grid")
    show.set_defaults(handler=run_show)

    to_vllm_cmd = sub.add_parser("to-vllm", help="print num_speculative_tokens_per_batch_size")
    to_vllm_cmd.add_argument("file", type=Path, help="SpeculationProfile (YAML or JSON)")
    to_vllm_cmd.add_argument(
        "--derive", action="store_true", help="derive even when the file has a schedule"
    )
    to_vllm_cmd.set_defaults(handler=run_to_vllm)


def _load(path: Path) -> SpeculationProfile | None:
    """The validated profile, or None after reporting every problem on stderr."""
    try:
        return load_profile(path)
    except ProfileError as err:
        _report(path, err)
        return None


def _report(path: Path, err: ProfileError) -> None:
    """One line per problem (a YAML parser's message spans several: joined)."""
    for problem in err.problems:
        print(f"{path}: {' '.join(problem.split())}", file=sys.stderr)


# --- derive ----------------------------------------------------------------


def run_derive(args: argparse.Namespace) -> int:
    doc = _load(args.file)
    if doc is None:
        return EXIT_INVALID
    derived = doc.with_schedule(derive_schedule(doc.spec, args.max_batch_size))
    try:
        text = dump_profile(derived, fmt=args.format)
    except ProfileError as err:  # e.g. maxK 0: vLLM accepts no table at all
        _report(args.file, err)
        return EXIT_INVALID
    sys.stdout.write(text)
    return 0


# --- to-vllm ---------------------------------------------------------------


def run_to_vllm(args: argparse.Namespace) -> int:
    doc = _load(args.file)
    if doc is None:
        return EXIT_INVALID
    if doc.spec.schedule is not None and not args.derive:
        schedule: Sequence[Sequence[int]] = doc.spec.schedule
    else:
        schedule = derive_schedule(doc.spec)
    print(json.dumps(to_vllm(schedule)))
    return 0


# --- show ------------------------------------------------------------------


def _source_note(doc: SpeculationProfile) -> str:
    """Say plainly where the numbers come from: a model is not a measurement."""
    notes = {
        Source.MEASURED: "measured on a real engine",
        Source.MODELLED: "modelled by the simulator, not measured",
        Source.SHIPPED: "shipped with specdeploy",
    }
    return notes[doc.spec.source]


def _cell(value: float, width: int, digits: int, mark: bool = False) -> str:
    text = "-" if math.isnan(value) else f"{value:.{digits}f}" + ("*" if mark else " ")
    return text.rjust(width)


def _table_lines(
    title: str, grid: FloatArray, sizes: list[int], best: Sequence[int], digits: int
) -> list[str]:
    ks = range(grid.shape[1])
    lines = [title, "    bs" + "".join(f"K={k}".rjust(10) for k in ks) + "  best K"]
    for bs in sizes:
        cells = "".join(_cell(grid[bs, k], 10, digits, mark=k == best[bs]) for k in ks)
        lines.append(f"{bs:>6}{cells}{best[bs]:>8}")
    return lines


def show_text(doc: SpeculationProfile, max_batch_size: int | None = None) -> str:
    """The human report: ITL and goodput per measured batch size, best K, schedule."""
    spec, fp = doc.spec, doc.spec.fingerprint
    itl = itl_grid(spec, max_batch_size)
    goodput = goodput_grid(spec, max_batch_size)
    best = [int(k) for k in best_k_per_batch_size(goodput, allowed=k_values(spec))]
    sizes = sorted({m.batch_size for m in spec.measurements if m.batch_size < itl.shape[0]})
    draft = f" draft {fp.draft_model}" if fp.draft_model else ""
    lines = [
        f"SpeculationProfile {doc.metadata.name or '(unnamed)'}: {_source_note(doc)}",
        f"{fp.model} {fp.method}{draft} on {fp.gpu_type} x{fp.gpus_per_replica}, "
        f"maxK {fp.max_k}, acceptance per position {list(spec.acceptance.per_position)}",
        "",
        *_table_lines("step time ITL (ms)", itl, sizes, best, 2),
        "",
        *_table_lines("goodput (tokens/s per sequence, * = best)", goodput, sizes, best, 1),
        "",
        f"schedule (derived): {format_schedule(compress(best))}",
    ]
    if spec.schedule is not None:
        lines.append(f"schedule (in file): {format_schedule(spec.schedule)}")
    return "\n".join(lines) + "\n"


def run_show(args: argparse.Namespace) -> int:
    if args.plot is not None and (missing := missing_plots()):
        print(f"specdeploy table show: {missing}", file=sys.stderr)
        return EXIT_INVALID
    doc = _load(args.file)
    if doc is None:
        return EXIT_INVALID
    sys.stdout.write(show_text(doc, args.max_batch_size))
    if args.plot is not None:
        plot_goodput(doc, args.plot, args.max_batch_size)
        print(f"plot written to {args.plot}")
    return 0


# --- plot ------------------------------------------------------------------


def plot_goodput(doc: SpeculationProfile, out: Path, max_batch_size: int | None = None) -> None:
    """Goodput per sequence and in total against batch size, best-K ranges shaded.

    Drawn with the Agg backend: no display is needed (profiling Jobs, CI).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    spec = doc.spec
    goodput = goodput_grid(spec, max_batch_size)
    best = best_k_per_batch_size(goodput, allowed=k_values(spec))
    sizes = np.arange(1, goodput.shape[0])
    fig, (per_seq, total) = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, spec.fingerprint.max_k + 1))
    for k in k_values(spec):
        per_seq.plot(sizes, goodput[1:, k], color=colors[k], label=f"K={k}")
        total.plot(sizes, sizes * goodput[1:, k], color=colors[k], label=f"K={k}")
        measured = np.array([m.batch_size for m in spec.measurements if m.k == k])
        measured = measured[measured < goodput.shape[0]]
        per_seq.plot(measured, goodput[measured, k], "o", color=colors[k], ms=3)
        total.plot(measured, measured * goodput[measured, k], "o", color=colors[k], ms=3)
    for lo, hi, k in compress([int(v) for v in best]):
        for ax in (per_seq, total):
            ax.axvspan(lo - 0.5 if lo > 1 else 1, hi + 0.5, color=colors[k], alpha=0.12, lw=0)
        where = (math.sqrt(lo * hi), 0.98)
        per_seq.annotate(f"K={k}", where, xycoords=("data", "axes fraction"), ha="center", va="top")
    for ax, label in ((per_seq, "tokens/s per sequence"), (total, "tokens/s (batch x goodput)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (scheduled requests)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    total.legend(title="draft length", fontsize=8)
    fp = spec.fingerprint
    fig.suptitle(
        f"{fp.model} · {fp.method} · {fp.gpu_type} x{fp.gpus_per_replica}\n"
        f"{spec.source.value.upper()} profile ({_source_note(doc)}); "
        "shaded: best K per batch size, dots: measured cells"
    )
    fig.savefig(out, dpi=110)
    plt.close(fig)
