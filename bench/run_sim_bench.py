"""The simulator benchmark (``make demo``): every figure it prints is MODELLED.

Runs ``specdeploy simulate`` (in-process, through the CLI contract) on the
``seed-dense`` and ``seed-moe`` presets, the drift and oscillation scenarios,
and the hot-path timing, then checks the foundation issue's targets:

* seed-dense: fixed K=3 falls below vanilla at BS 256; adaptive >= 0.99 x
  max(vanilla, fixed:3) at every batch size, >= 1.15 x fixed:3 at BS 256,
  >= 0.98 x oracle everywhere;
* seed-moe: the best fixed K is non-monotonic in batch size;
* drift: adaptive back within 2% of the oracle for the new acceptance
  within 2,000 steps; the static table is not;
* oscillate: adaptive makes <= 1 K change per 1,000 steps and stays
  >= 0.98 x oracle; the per-step lookup's count is reported;
* hot path: choose_k <= 2 us per call (measured, CPython on this machine).

Writes JSON and PNG per run and ``SUMMARY.md`` under ``--out``; exits 1 if
a target is missed.

    python bench/run_sim_bench.py [--out bench/results] [--steps 3000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
POLICIES = "vanilla,fixed:3,table,adaptive,oracle"
BATCH_SIZES = "1,2,4,8,16,32,64,128,256"
HOT_PATH_LIMIT_NS = 2000.0


@dataclass(frozen=True)
class Check:
    """One target: what it says, whether it held, the figures behind it."""

    target: str
    passed: bool
    detail: str


def _simulate(out: Path, name: str, steps: int, *extra: str) -> dict[str, Any]:
    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    argv = ["simulate", "--steps", str(steps), "--json", str(json_path), "--plot", str(png_path)]
    code = cli_main([*argv, "--policies", POLICIES, *extra])
    if code != 0:
        raise SystemExit(f"specdeploy simulate failed for {name} (exit {code})")
    doc: dict[str, Any] = json.loads(json_path.read_text())
    return doc


def _by(doc: dict[str, Any]) -> dict[tuple[str, float], dict[str, Any]]:
    return {(r["policy"], r["batch_size"]): r for r in doc["results"]}


def _sizes(doc: dict[str, Any]) -> list[float]:
    return sorted({r["batch_size"] for r in doc["results"]})


def check_seed_dense(doc: dict[str, Any]) -> list[Check]:
    r = _by(doc)

    def tps(policy: str, bs: float) -> float:
        return float(r[(policy, bs)]["tokens_per_s"])

    sizes = _sizes(doc)
    worst_base = min(
        (tps("adaptive", b) / max(tps("vanilla", b), tps("fixed:3", b)), b) for b in sizes
    )
    worst_oracle = min((tps("adaptive", b) / tps("oracle", b), b) for b in sizes)
    return [
        Check(
            "seed-dense: fixed:3 below vanilla at BS 256",
            tps("fixed:3", 256) < tps("vanilla", 256),
            f"fixed:3 / vanilla = {tps('fixed:3', 256) / tps('vanilla', 256):.3f}",
        ),
        Check(
            "seed-dense: adaptive >= 0.99 x max(vanilla, fixed:3) at every BS",
            worst_base[0] >= 0.99,
            f"worst {worst_base[0]:.3f} at BS {worst_base[1]:g}",
        ),
        Check(
            "seed-dense: adaptive >= 1.15 x fixed:3 at BS 256",
            tps("adaptive", 256) >= 1.15 * tps("fixed:3", 256),
            f"adaptive / fixed:3 = {tps('adaptive', 256) / tps('fixed:3', 256):.3f}",
        ),
        Check(
            "seed-dense: adaptive >= 0.98 x oracle at every BS",
            worst_oracle[0] >= 0.98,
            f"worst {worst_oracle[0]:.3f} at BS {worst_oracle[1]:g}",
        ),
    ]


def _non_monotonic(ks: list[int]) -> bool:
    rises = any(b > a for a, b in itertools.pairwise(ks))
    falls = any(b < a for a, b in itertools.pairwise(ks))
    return rises and falls


def check_seed_moe(doc: dict[str, Any]) -> list[Check]:
    r = _by(doc)
    ks = [int(r[("oracle", b)]["oracle_k"]) for b in _sizes(doc)]
    return [
        Check(
            "seed-moe: best fixed K non-monotonic in batch size",
            _non_monotonic(ks),
            "best K per BS " + " ".join(f"{b:g}:{k}" for b, k in zip(_sizes(doc), ks, strict=True)),
        )
    ]


def check_drift(doc: dict[str, Any]) -> list[Check]:
    rows = {r["policy"]: r for r in doc["results"]}
    a, t = rows["adaptive"], rows["table"]
    s = doc["scenario"]
    return [
        Check(
            "drift: adaptive within 2% of the new oracle within 2,000 steps",
            a["recovery_steps"] is not None and a["recovery_steps"] <= 2000,
            f"recovery {a['recovery_steps']} steps; final {a['final_ratio_to_oracle']:.3f} x "
            f"oracle (K {s['oracle_k_before']} -> {s['oracle_k_after']})",
        ),
        Check(
            "drift: the static table does not recover",
            t["recovery_steps"] is None,
            f"table final {t['final_ratio_to_oracle']:.3f} x oracle",
        ),
    ]


def check_oscillate(doc: dict[str, Any]) -> list[Check]:
    rows = {r["policy"]: r for r in doc["results"]}
    a, t, o = rows["adaptive"], rows["table"], rows["oracle"]
    ratio = a["tokens_per_s"] / o["tokens_per_s"]
    return [
        Check(
            "oscillate: adaptive <= 1 K change per 1,000 steps",
            a["k_changes_per_1000_steps"] <= 1.0,
            f"adaptive {a['k_changes_per_1000_steps']:.2f}, per-step table lookup "
            f"{t['k_changes_per_1000_steps']:.1f} per 1,000 steps",
        ),
        Check(
            "oscillate: adaptive >= 0.98 x oracle",
            ratio >= 0.98,
            f"adaptive / oracle = {ratio:.3f}",
        ),
    ]


def run_hot_path(out: Path) -> tuple[dict[str, Any], list[Check]]:
    path = out / "hot_path.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_hot_path.py"), "--out", str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    doc: dict[str, Any] = json.loads(path.read_text())
    ns = float(doc["ns_per_call"]["adaptive.choose_k"])
    return doc, [
        Check(
            "hot path: adaptive choose_k <= 2 us (measured)",
            ns <= HOT_PATH_LIMIT_NS,
            f"{ns:.0f} ns per call",
        )
    ]


def _steady_table(doc: dict[str, Any]) -> list[str]:
    r = _by(doc)
    policies = list(dict.fromkeys(x["policy"] for x in doc["results"]))
    lines = [
        "| BS | " + " | ".join(policies) + " | best fixed K |",
        "|---" * (len(policies) + 2) + "|",
    ]
    for b in _sizes(doc):
        cells = " | ".join(f"{r[(p, b)]['tokens_per_s']:.0f}" for p in policies)
        lines.append(f"| {b:g} | {cells} | {r[('oracle', b)]['oracle_k']} |")
    return lines


def _scenario_table(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| policy | tokens/s | mean K | K changes / 1000 steps | notes |",
        "|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        note = ""
        if "recovery_steps" in r:
            ratio = r["final_ratio_to_oracle"]
            note = f"recovery {r['recovery_steps']} steps, final {ratio:.3f} x oracle"
        lines.append(
            f"| {r['policy']} | {r['tokens_per_s']:.0f} | {r['mean_k']:.2f} | "
            f"{r['k_changes_per_1000_steps']:.2f} | {note} |"
        )
    return lines


def write_summary(
    out: Path, docs: dict[str, dict[str, Any]], checks: list[Check], secs: float
) -> None:
    lines = [
        "# Simulator benchmark results (MODELLED, not measured)",
        "",
        "Produced by `make demo` (`python bench/run_sim_bench.py`); every tokens/s figure",
        "comes from the simulator (`specdeploy.runtime.sim`), not from a GPU. The hot-path",
        f"timing is measured on this machine. Wall time of the whole run: {secs:.0f} s.",
        "",
        "## Targets",
        "",
        "| target | result | figures |",
        "|---|---|---|",
        *[f"| {c.target} | {'PASS' if c.passed else 'FAIL'} | {c.detail} |" for c in checks],
    ]
    for name in ("seed-dense", "seed-moe"):
        d = docs[name]
        lines += ["", f"## {name}: tokens/s by batch size and policy", "", d["description"], ""]
        lines += _steady_table(d)
        lines += ["", f"Table schedule (from the modelled profile): `{d['schedule']}`"]
    for name in ("drift", "oscillate"):
        d = docs[name]
        scen = {k: v for k, v in d["scenario"].items() if not k.startswith("acceptance")}
        lines += ["", f"## {name} ({d['preset']})", "", f"`{json.dumps(scen)}`", ""]
        lines += _scenario_table(d)
    hot = docs["hot_path"]
    lines += ["", "## Hot path (measured, CPython, ns per call)", "", "| call | ns |", "|---|---|"]
    lines += [f"| {name} | {ns:.0f} |" for name, ns in hot["ns_per_call"].items()]
    lines += ["", f"Load average during the run: {hot['load_average_1m']} on {hot['cpus']} CPUs."]
    (out / "SUMMARY.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    steady = ["--batch-sizes", BATCH_SIZES]
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "seed-dense": lambda: _simulate(
            args.out, "seed-dense", args.steps, "--preset", "seed-dense", *steady
        ),
        "seed-moe": lambda: _simulate(
            args.out, "seed-moe", args.steps, "--preset", "seed-moe", *steady
        ),
        "drift": lambda: _simulate(
            args.out,
            "drift",
            args.steps,
            "--preset",
            "seed-dense",
            "--scenario",
            "drift",
            "--batch-sizes",
            "32",
        ),
        "oscillate": lambda: _simulate(
            # long enough that the adaptive policy's rare exploration steps are counted
            args.out,
            "oscillate",
            max(args.steps, 10_000),
            "--preset",
            "seed-dense",
            "--scenario",
            "oscillate",
        ),
    }
    docs = {name: run() for name, run in runs.items()}
    checks = (
        check_seed_dense(docs["seed-dense"])
        + check_seed_moe(docs["seed-moe"])
        + check_drift(docs["drift"])
        + check_oscillate(docs["oscillate"])
    )
    docs["hot_path"], hot_checks = run_hot_path(args.out)
    checks += hot_checks
    write_summary(args.out, docs, checks, time.monotonic() - started)
    print()
    for c in checks:
        print(f"{'PASS' if c.passed else 'FAIL'}  {c.target}: {c.detail}")
    print(f"summary: {args.out / 'SUMMARY.md'}")
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
