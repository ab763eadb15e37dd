"""``specdeploy simulate``: K policies side by side on a simulated replica (modelled).

Contract relied on by scripts (see README):

    specdeploy simulate --preset NAME --batch-sizes 1,2,4 \\
        --policies vanilla,fixed:3,table,adaptive,oracle --json OUT.json [--plot OUT.png]
    specdeploy simulate --preset NAME --scenario S --policies ... --json OUT.json
        S: drift | oscillate | rollout | phased | collapse | pessimistic-profile |
           slower-machine | wrong-machine | mixed
    specdeploy simulate --list-presets

JSON: ``{"preset": NAME, "source": "modelled", "seeds": [...], "scenario":
{...}, "results": [{"policy", "batch_size", "tokens_per_s", "mean_k",
"k_changes_per_1000_steps", "seeds", "spread", "per_seed", ...}]}`` with one
record per policy and batch size (per policy for a single-batch scenario,
its ``batch_size`` being the mean). Headline figures are means over the
seeds; ``spread`` gives mean, sd, min and max of every per-seed figure, and
``per_seed`` the figures themselves.
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
DEFAULT_SEEDS = "0,1,2"
SCENARIO_BATCH_SIZES = {
    "steady": "1,2,4,8,16,32,64,128,256",
    "drift": "32",
    "collapse": "32",
    "pessimistic-profile": "8,32,64,128,256",
    "slower-machine": "1,8,32,64,128,256",
    "wrong-machine": "1,4,16,64,256",
    "mixed": "8,32,64,128,256",
}
"""Default ``--batch-sizes`` per scenario (the others set their own load)."""
SCENARIOS = (
    "steady",
    "drift",
    "oscillate",
    "rollout",
    "phased",
    "collapse",
    "pessimistic-profile",
    "slower-machine",
    "wrong-machine",
    "mixed",
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="compare K policies on the simulator (modelled figures)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--list-presets", action="store_true", help="list presets and exit")
    p.add_argument("--preset", help="simulator preset (see --list-presets)")
    p.add_argument(
        "--batch-sizes",
        help="comma-separated (default per scenario; oscillate: the first is the centre)",
    )
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated")
    p.add_argument("--scenario", choices=SCENARIOS, default="steady")
    p.add_argument("--steps", type=int, default=3000, help="counted steps per run")
    p.add_argument("--warmup-steps", type=int, default=300)
    p.add_argument(
        "--seeds", default=DEFAULT_SEEDS, help="comma-separated; every policy runs on each"
    )
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
    from specdeploy.runtime.sim.compare import Comparison, RunSettings, parse_policies
    from specdeploy.runtime.sim.presets import get_preset
    from specdeploy.runtime.sim.seeds import parse_seeds

    preset = get_preset(args.preset)
    policies = parse_policies(args.policies, max_k=preset.max_k)
    seeds = parse_seeds(args.seeds)
    explicit_sizes = args.batch_sizes is not None
    sizes = _batch_sizes(args.batch_sizes or SCENARIO_BATCH_SIZES.get(args.scenario, "32"))
    progress = None if args.quiet else _progress_printer()
    started = time.monotonic()
    serving, profiled = _machines(preset, args.scenario)
    for bs in sizes:
        if bs > serving.max_batch_size:
            raise ValueError(
                f"--batch-sizes: {bs} exceeds the preset's max batch size {serving.max_batch_size}"
            )
    if progress:
        progress(f"profiling {profiled.name} on the simulator")
    profile = _profile(profiled, seeds[0])
    if args.profile_out:
        save_profile(profile, args.profile_out)
    settings = RunSettings(steps=args.steps, warmup_steps=args.warmup_steps, seeds=seeds)
    cmp = Comparison(serving, profile, settings)
    rows, scenario = _run_scenario(cmp, args.scenario, sizes, explicit_sizes, policies, progress)
    doc: dict[str, Any] = {
        "preset": preset.name,
        "source": "modelled",
        "description": preset.description,
        "seeds": list(seeds),
        "scenario": scenario,
        "schedule": [list(r) for r in _schedule(profile)],
        "seconds": round(time.monotonic() - started, 2),
        "results": [r.record() for r in rows],
    }
    if serving.name != preset.name or profiled.name != preset.name:
        doc["served_on"], doc["profiled_on"] = serving.name, profiled.name
    return doc


def _machines(preset: Any, scenario: str) -> tuple[Any, Any]:
    """(serving preset, profiled preset): the same machine unless the scenario differs them."""
    from specdeploy.runtime.sim.scenarios import (
        drift_preset,
        half_compute,
        mixed_preset,
        steeper_verification,
        uniformly_slower,
    )

    if scenario == "drift":
        return preset, drift_preset(preset)
    if scenario == "pessimistic-profile":
        return preset, half_compute(preset)
    if scenario == "slower-machine":
        return uniformly_slower(preset), preset
    if scenario == "wrong-machine":
        return steeper_verification(preset), preset
    if scenario == "mixed":
        mixed = mixed_preset(preset)
        return mixed, mixed
    return preset, preset


def _profile(preset: Any, seed: int) -> Any:
    from specdeploy.runtime.sim.profiling import DEFAULT_BATCH_SIZES, profile_preset

    grid = [b for b in DEFAULT_BATCH_SIZES if b <= preset.max_batch_size]
    return profile_preset(preset, grid, seed=seed)


def _run_scenario(
    cmp: Any,
    scenario: str,
    sizes: list[int],
    explicit_sizes: bool,
    policies: list[str],
    progress: Any,
) -> tuple[list[Any], dict[str, Any]]:
    from specdeploy.runtime.sim import scenarios as sc
    from specdeploy.runtime.sim.compare import compare_steady

    if scenario == "steady":
        return compare_steady(cmp, sizes, policies, progress=progress), {
            "name": "steady",
            "steps": cmp.settings.steps,
        }
    if scenario == "drift":
        return sc.compare_drift(cmp, sizes[0], policies, progress=progress)
    if scenario == "oscillate":
        center = sizes[0] if explicit_sizes else None
        return sc.compare_oscillate(cmp, policies, center=center, progress=progress)
    if scenario == "rollout":
        return sc.compare_rollout(cmp, policies, progress=progress)
    if scenario == "phased":
        return sc.compare_phased(cmp, policies, progress=progress)
    if scenario == "collapse":
        return sc.compare_collapse(cmp, sizes[0], policies, progress=progress)
    if scenario == "pessimistic-profile":
        return sc.compare_pessimistic_profile(cmp, sizes, policies, progress=progress)
    if scenario == "slower-machine":
        return sc.compare_slower_machine(cmp, sizes, policies, progress=progress)
    if scenario == "wrong-machine":
        return sc.compare_wrong_machine(cmp, sizes, policies, progress=progress)
    if scenario == "mixed":
        return sc.compare_mixed(cmp, sizes, policies, progress=progress)
    raise ValueError(f"--scenario: unknown {scenario!r}")


def _schedule(profile: Any) -> list[tuple[int, int, int]]:
    from specdeploy.runtime.schedule import derive_schedule

    return derive_schedule(profile.spec)


def _progress_printer() -> Any:
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def _print_table(doc: dict[str, Any]) -> None:
    """Batch size x policy: tokens/s mean (sd over seeds) and mean K."""
    results = doc["results"]
    policies = list(dict.fromkeys(r["policy"] for r in results))
    print(f"preset {doc['preset']} ({doc['source']}: simulator figures, not measurements)")
    print(
        f"scenario {doc['scenario']['name']}; seeds {doc['seeds']}; "
        f"table schedule {doc['schedule']}"
    )
    print("tokens/s mean (sd over seeds) [mean K]")
    sizes = {p: [r["batch_size"] for r in results if r["policy"] == p] for p in policies}
    if len({tuple(v) for v in sizes.values()}) == 1:
        print(f"{'bs':>8}" + "".join(f"{p:>24}" for p in policies))
        by_bs: dict[float, dict[str, dict[str, Any]]] = {}
        for r in results:
            by_bs.setdefault(r["batch_size"], {})[r["policy"]] = r
        for bs, row in by_bs.items():
            print(f"{bs:>8g}" + "".join(_cell(row[p]) for p in policies))
    else:  # one row per policy, at its own mean batch size
        for r in results:
            print(f"{r['policy']:>20}{_cell(r)}   mean batch size {r['batch_size']:.1f}")
    if doc["scenario"]["name"] == "steady":
        return
    if len(results) == len(policies):
        print(
            "K changes per 1000 steps: "
            + ", ".join(f"{r['policy']} {r['k_changes_per_1000_steps']:.1f}" for r in results)
        )
    for r in results:
        if "mean_latency_s" in r["spread"]:
            lat = r["spread"]["mean_latency_s"]
            print(f"  {r['policy']}: mean latency {lat['mean']:.3f} s (sd {lat['sd']:.3f})")
        if "recovery_steps" in r:
            print(
                f"  {r['policy']}: recovery {r['recovery_steps']} steps (worst seed), "
                f"final {r['final_ratio_to_oracle']:.3f} x oracle"
            )


def _cell(record: dict[str, Any]) -> str:
    tps = record["spread"]["tokens_per_s"]
    return f"{tps['mean']:>10.0f} ({tps['sd']:>5.0f}) [{record['mean_k']:.1f}]"
