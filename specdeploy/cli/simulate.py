"""``specdeploy simulate``: K policies side by side on a simulated replica (modelled).

Contract relied on by scripts (see README):

    specdeploy simulate --preset NAME --batch-sizes 1,2,4 \\
        --policies vanilla,fixed:3,table,adaptive,oracle --json OUT.json [--plot OUT.png]
    specdeploy simulate --preset NAME --scenario drift|oscillate ...
    specdeploy simulate --list-presets

JSON: ``{"preset": NAME, "source": "modelled", "scenario": {...}, "results":
[{"policy", "batch_size", "tokens_per_s", "mean_k", "k_changes_per_1000_steps", ...}]}``
with one record per policy and batch size (per policy for a scenario, its
``batch_size`` being the mean).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from specdeploy.cli.plots import missing_plots

DEFAULT_POLICIES = "vanilla,fixed:3,table,adaptive,oracle"
DEFAULT_BATCH_SIZES = "1,2,4,8,16,32,64,128,256"
SCENARIOS = ("steady", "drift", "oscillate")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="compare K policies on the simulator (modelled figures)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--list-presets", action="store_true", help="list presets and exit")
    p.add_argument("--preset", help="simulator preset (see --list-presets)")
    p.add_argument("--batch-sizes", default=DEFAULT_BATCH_SIZES, help="comma-separated")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated")
    p.add_argument("--scenario", choices=SCENARIOS, default="steady")
    p.add_argument("--steps", type=int, default=3000, help="counted steps per run")
    p.add_argument("--warmup-steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", type=Path, help="write results as JSON")
    p.add_argument("--plot", type=Path, help="write a PNG chart")
    p.add_argument("--profile-out", type=Path, help="also save the preset's modelled profile")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=run)


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(
            f"--batch-sizes: expected comma-separated integers, got {text!r}"
        ) from None
    if not sizes or any(b < 1 for b in sizes):
        raise ValueError(f"--batch-sizes: every batch size must be >= 1, got {text!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"--batch-sizes: duplicate batch size in {text!r}")
    return sizes


def run(args: argparse.Namespace) -> int:
    from specdeploy.runtime.sim.presets import get_preset, list_presets

    if args.list_presets:
        for name in list_presets():
            print(f"{name:<16} {get_preset(name).description}")
        return 0
    try:
        if args.plot and (missing := missing_plots()):
            raise ValueError(missing)
        if not args.preset:
            raise ValueError("--preset: required (see --list-presets)")
        if args.steps < 100 or args.warmup_steps < 0:
            raise ValueError("--steps must be >= 100 and --warmup-steps >= 0")
        document = _simulate(args)
    except (ValueError, KeyError) as err:
        message = err.args[0] if err.args else str(err)
        print(f"specdeploy simulate: {message}", file=sys.stderr)
        return 2
    _print_table(document)
    if args.json_out:
        args.json_out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"JSON written to {args.json_out}")
    if args.plot:
        from specdeploy.cli.simulate_plot import plot_document

        plot_document(document, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def _simulate(args: argparse.Namespace) -> dict[str, Any]:
    from specdeploy.runtime.profile import save_profile
    from specdeploy.runtime.sim.compare import (
        Comparison,
        RunSettings,
        compare_steady,
        parse_policies,
    )
    from specdeploy.runtime.sim.presets import get_preset
    from specdeploy.runtime.sim.profiling import DEFAULT_BATCH_SIZES as PROFILE_SIZES
    from specdeploy.runtime.sim.profiling import profile_preset
    from specdeploy.runtime.sim.scenarios import compare_drift, compare_oscillate

    preset = get_preset(args.preset)
    policies = parse_policies(args.policies, max_k=preset.max_k)
    sizes = _batch_sizes(args.batch_sizes)
    progress = None if args.quiet else _progress_printer()
    started = time.monotonic()
    if progress:
        progress(f"profiling preset {preset.name} on the simulator")
    grid = [b for b in PROFILE_SIZES if b <= preset.max_batch_size]
    profile = profile_preset(preset, grid, seed=args.seed)
    if args.profile_out:
        save_profile(profile, args.profile_out)
    settings = RunSettings(steps=args.steps, warmup_steps=args.warmup_steps, seed=args.seed)
    cmp = Comparison(preset, profile, settings)
    scenario: dict[str, Any]
    if args.scenario == "steady":
        rows = compare_steady(cmp, sizes, policies, progress=progress)
        scenario = {"name": "steady", "steps": args.steps}
    elif args.scenario == "drift":
        rows, scenario = compare_drift(cmp, sizes[0], policies, progress=progress)
    else:
        center = sizes[0] if args.batch_sizes != DEFAULT_BATCH_SIZES else None
        rows, scenario = compare_oscillate(cmp, policies, center=center, progress=progress)
    return {
        "preset": preset.name,
        "source": "modelled",
        "description": preset.description,
        "scenario": scenario,
        "schedule": [list(r) for r in _schedule(profile)],
        "seconds": round(time.monotonic() - started, 2),
        "results": [r.record() for r in rows],
    }


def _schedule(profile: Any) -> list[tuple[int, int, int]]:
    from specdeploy.runtime.schedule import derive_schedule

    return derive_schedule(profile.spec)


def _progress_printer() -> Any:
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def _print_table(doc: dict[str, Any]) -> None:
    """Batch size x policy, tokens/s (and mean K); scenario rows one per policy."""
    results = doc["results"]
    policies = list(dict.fromkeys(r["policy"] for r in results))
    print(f"preset {doc['preset']} ({doc['source']}: simulator figures, not measurements)")
    print(f"scenario {doc['scenario']['name']}; table schedule {doc['schedule']}")
    header = f"{'bs':>8}" + "".join(f"{p:>16}" for p in policies)
    print("tokens/s (mean K)")
    print(header)
    by_bs: dict[float, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_bs.setdefault(r["batch_size"], {})[r["policy"]] = r
    for bs, row in by_bs.items():
        cells = "".join(
            f"{row[p]['tokens_per_s']:>9.0f} ({row[p]['mean_k']:.1f})" if p in row else " " * 16
            for p in policies
        )
        print(f"{bs:>8g}{cells}")
    if doc["scenario"]["name"] != "steady":
        print(
            "K changes per 1000 steps: "
            + ", ".join(f"{r['policy']} {r['k_changes_per_1000_steps']:.1f}" for r in results)
        )
        for r in results:
            if "recovery_steps" in r:
                print(
                    f"  {r['policy']}: recovery {r['recovery_steps']} steps, "
                    f"final {r['final_ratio_to_oracle']:.3f} x oracle"
                )
