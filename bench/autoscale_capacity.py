"""The capacity model against the emulated pod's measured throughput (issue 17, deliverable 2).

Why: the autoscaler sizes a pool as demand over one replica's capacity, and
that capacity (``runtime.capacity.replica_capacity``) is a prediction from a
profile's goodput grid and the K table in force. This bench checks the
prediction against what a serving pod of the local cluster actually delivers
when driven at the predicted batch size.

For each GPU type of the local cluster's default fleet, the pool gets the
profile the operator would get there: the operator's own profiling-Job
arguments (``builders.job.profiler_args`` for ``examples/specdeploy.yaml``),
turned into the simulator run by the kubelet stand-in's own rule
(``emulation.profiler_args``), run through ``specdeploy profile``. Then, per
workload (``chat``: the profile's acceptance and schedule; ``random``: the
collapsed acceptance and the schedule the telemetry loop re-derives for it)
and per TPOT target, it predicts (batch size, K, tokens/s, TPOT) and
MEASURES the emulated vLLM server process (``python -m e2e.emulated.vllm_serve``,
what serving pods run, with the operator's serving arguments and the real
add-on under ``policy: table``) with the specdeploy load generator's client
in a closed loop at that concurrency (ignore_eos, output lengths spread so
requests do not finish in waves): output tokens/s from the server's
``vllm:generation_tokens_total`` over batch-mean windows, TPOT per request
from the client.

What it shows and does not: the emulated pod is MODELLED (its step times are
the simulator's cost model, no GPU), so agreement checks the capacity
arithmetic, the profile's fit and acceptance estimate, the pod's batching,
acceptance sampling, prefill interleaving and queueing against the model;
it says nothing about a real GPU. Rates are in the emulated GPU's time: wall
figures times the server's time scale (chosen per case so the host keeps up),
and the server's own "host behind" figure is recorded. Usage::

    nice .venv/bin/python bench/autoscale_capacity.py [--out bench/results] [--tpot-ms 12,24]
    nice .venv/bin/python bench/autoscale_capacity.py --one-word-prompts   # the diagnosis
    .venv/bin/python bench/autoscale_capacity.py --render bench/results/autoscale_capacity.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import math
import os
import platform
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: e2e.* and bench.* from the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from e2e.emulated.catalog import emulated_preset
from e2e.emulated.workloads import Workload, class_models
from e2e.localcluster import emulation
from e2e.localcluster.fleet import DEFAULT_SPEC, parse_fleet
from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.deployment import ServingPool, allowed_k, vllm_args
from specdeploy.operator.builders.job import profiler_args
from specdeploy.operator.pool.fingerprint import pool_fingerprint
from specdeploy.runtime.capacity import Capacity, replica_capacity
from specdeploy.runtime.contract import PodEnv, Policy, PoolTable
from specdeploy.runtime.goodput import acceptance_lengths
from specdeploy.runtime.intervals import mean_half_width
from specdeploy.runtime.live import derive_live_schedule, live_goodput_grid
from specdeploy.runtime.profile import ProfileSpec, load_profile
from specdeploy.runtime.schedule import cost_model, goodput_grid, modelled_itl_grid

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specdeploy.yaml"
TPOT_TARGETS_MS = (12.0, 24.0)
WORKLOADS = (Workload.CHAT, Workload.RANDOM)
OUTPUT_TOKENS = (256, 768)
"""Each request's max_tokens, uniform in this range (ignore_eos): long enough that a
prompt's prefill is a small share of a request, spread so that finishes do not align
(each worker's first request is shorter still: ``first_request_tokens``)."""
WARMUP_REQUEST_SHARE = 0.2
WINDOWS = 4
WINDOW_REQUEST_SHARE = 0.2
"""Warm-up and each batch-mean window, as shares of a mean request's modelled duration."""
MAX_WALL_CHUNKS_PER_S = 3000.0
"""Stream chunks per wall second the host is asked for (one per request per step): the
time scale is raised until the modelled load fits under it."""
TARGET_ERROR = 0.10
MAX_BEHIND_SHARE = 0.02
"""The share of a run's wall time the pod may fall behind its pacing before the case is
run again, slower (``run_case``)."""
SERVED = "llama-8b"


# --- pure helpers ----------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A mean and its 95% half-width (NaN half-width from fewer than two values)."""

    mean: float
    half_width: float

    def as_dict(self, digits: int = 4) -> dict[str, float | None]:
        """JSON-ready (a NaN half-width, from one value, becomes None)."""
        half = None if math.isnan(self.half_width) else round(self.half_width, digits)
        return {"mean": round(self.mean, digits), "halfWidth": half}


def interval(values: Sequence[float]) -> Interval:
    """Mean and Student-t half-width of (close to independent) batch means."""
    if not values:
        raise ValueError("no values")
    mean = sum(values) / len(values)
    return Interval(mean, mean_half_width(values) if len(values) > 1 else float("nan"))


def window_rates(samples: Sequence[tuple[float, float]]) -> list[float]:
    """Per-window rates of a counter from (time, value) samples in time order."""
    rates = []
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t1 <= t0:
            raise ValueError(f"samples out of time order at t={t1}")
        rates.append((v1 - v0) / (t1 - t0))
    return rates


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured: positive when the model promises too much."""
    if measured <= 0:
        raise ValueError(f"measured must be > 0, got {measured}")
    return predicted / measured - 1.0


def time_scale_for(
    capacity: Capacity, al: float, max_chunks: float = MAX_WALL_CHUNKS_PER_S
) -> float:
    """Wall seconds per modelled second so that the pod streams at most ``max_chunks``/s.

    A request gains one chunk per step, a step lasts TPOT * AL modelled seconds, so the
    pod streams ``batch / (TPOT * AL)`` chunks per modelled second.
    """
    chunks = capacity.batch_size / (capacity.tpot_seconds * al)
    return max(1.0, chunks / max_chunks)


def first_request_split(rng: random.Random, output_tokens: tuple[int, int]) -> tuple[int, int]:
    """A worker's first request as one caught in progress: (tokens left, tokens done).

    The closed loop starts all workers at once; requests of full length would
    finish in one wave, and fresh ones would read a shorter context than the
    steady state's. A request met at a random time is drawn length-biased from
    ``output_tokens`` and is at a uniform point of its length: the worker's
    first request generates what is left, and carries what was done as extra
    prompt (prefilled in the warm-up), so finishes and contexts are those of
    the steady state from the first window on.
    """
    lo, hi = output_tokens
    if not 1 <= lo <= hi:
        raise ValueError(f"want 1 <= lo <= hi, got {output_tokens}")
    while True:  # length-biased: accept n with probability n / hi
        n = rng.randint(lo, hi)
        if rng.random() * hi < n:
            left = max(1, round(rng.random() * n))
            return left, n - left


def mean_decode_context(prompt_tokens: float, output_tokens: tuple[int, int]) -> float:
    """Mean context of a decoding sequence in the closed loop's steady state.

    A step meets a request with probability proportional to its length n
    (uniform on ``output_tokens``), at a uniform point of it: its context is
    the prompt plus E[n^2] / (2 E[n]) tokens on average.
    """
    lo, hi = output_tokens
    if not 1 <= lo <= hi:
        raise ValueError(f"want 1 <= lo <= hi, got {output_tokens}")
    count = hi - lo + 1
    mean = (lo + hi) / 2
    second = mean**2 + (count**2 - 1) / 12  # a discrete uniform's E[n^2]
    return prompt_tokens + second / (2 * mean)


def prefill_aware_rate(
    itl_ms: float, beta_ms: float, *, batch: int, al: float, prompt_per_output: float
) -> float:
    """Replica tokens/s when each output token brings ``prompt_per_output`` prompt tokens.

    A diagnosis, not the operator's model: a step that emits ``batch * al``
    tokens also prefills ``batch * al * prompt_per_output`` prompt tokens of the
    requests that replaced finished ones, each priced like a verified token
    (``beta_ms``, the profile's cost per verified token at that batch size).
    """
    step_ms = itl_ms + beta_ms * batch * al * prompt_per_output
    return batch * al / (step_ms / 1000.0)


def tpot_window_means(
    ends: Sequence[tuple[float, float | None]], edges: Sequence[float], time_scale: float
) -> list[float]:
    """Mean TPOT (modelled seconds) of the requests that ended in each window between
    consecutive ``edges`` (wall seconds on the run's clock); windows with none are left out.
    ``ends`` holds (end time, wall TPOT or None) per completed request."""
    means = []
    for lo, hi in itertools.pairwise(edges):
        got = [tpot for end, tpot in ends if tpot is not None and lo <= end < hi]
        if got:
            means.append(sum(got) / len(got) / time_scale)
    return means


def k_shares(steps_by_k: Mapping[int, float]) -> dict[int, float]:
    """Each K's share of the steps (empty when none ran)."""
    total = sum(steps_by_k.values())
    return {k: round(n / total, 4) for k, n in sorted(steps_by_k.items()) if n} if total else {}


def _pm(figure: Mapping[str, float | None] | None, scale: float, digits: int) -> str:
    """``mean ± half-width`` of an ``Interval.as_dict``, times ``scale`` ("-" when absent)."""
    if figure is None or figure["mean"] is None:
        return "-"
    text = f"{scale * figure['mean']:.{digits}f}"
    half = figure["halfWidth"]
    return text if half is None else f"{text} ± {scale * half:.{digits}f}"


def markdown(doc: Mapping[str, Any]) -> str:
    """The results as a short table, with what they are and are not."""
    lines = [
        "# Capacity model vs the emulated pod (issue 17)",
        "",
        "MODELLED: the emulated pod's step times come from the simulator's cost model, "
        "not a GPU. Predicted: `replica_capacity` on the pool's sim profile (chat: its "
        "acceptance and schedule; random: collapsed acceptance, re-derived schedule). "
        "Measured: the emulated vLLM server process at the predicted batch size "
        "(closed loop, ignore_eos), in the emulated GPU's time; ± is a 95% interval "
        "over batch-mean windows (tokens/s) and per-request TPOT.",
        "",
        f"Command: `{doc['command']}`; commit {doc['commit']}; {doc['machine']}; "
        f"{doc['wallSeconds']} s wall.",
        "",
        "| GPU | workload | TPOT target ms | batch | K | predicted tok/s | measured tok/s "
        "| error | predicted TPOT ms | measured TPOT ms | mean running | time scale "
        "| prompt/output tokens | at loop context: tok/s (error) | and prefill priced |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["cases"]:
        head = f"| {r['gpu']} | {r['workload']} | {r['tpotTargetMs']:g} "
        p = r.get("predicted")
        if p is None:
            lines.append(head + "| - | - | no batch meets the target | | | | | | | | | |")
            continue
        m, d = r["measured"], r["diagnosis"]
        lines.append(
            head + f"| {p['batchSize']} | {p['k']} | {p['tokensPerSecond']:.0f} "
            f"| {_pm(m['tokensPerSecond'], 1, 0)} | {100 * r['relativeError']:+.1f}% "
            f"| {1000 * p['tpotSeconds']:.2f} | {_pm(m['tpotSeconds'], 1000, 2)} "
            f"| {m['meanRunning']:.1f} | {m['timeScale']:g} "
            f"| {m['promptTokensPerOutputToken']:.3f} "
            f"| {d['contextAwareTokensPerSecond']:.0f} ({100 * d['contextAwareError']:+.1f}%) "
            f"| {d['prefillAwareTokensPerSecond']:.0f} ({100 * d['prefillAwareError']:+.1f}%) |"
        )
    s = doc["summary"]
    means = s.get("meanSignedError") or {}
    lines += [
        "",
        f"Prompts: {doc.get('prompts', 'the loadgen own')}; output tokens per request "
        f"uniform on {doc.get('outputTokens')}.",
        "",
        f"{s['within']} of {s['measured']} measured cases within ±{100 * TARGET_ERROR:.0f}% "
        f"(largest |error| {100 * s['maxAbsError']:.1f}%). Mean signed error: "
        + ", ".join(f"{name} {100 * v:+.1f}%" for name, v in means.items())
        + ".",
        "",
        "Reading it: error = predicted / measured - 1 (positive: the model promises "
        "more than the pod delivers). `replica_capacity` prices pure decode steps at "
        "the profile's reference context (its cells are pure decode steps). A pod in "
        "a closed loop also prefills, inside its decode steps, the prompt of every "
        "request that replaces a finished one (prompt/output tokens), and the "
        "prompts lengthen the context its sequences read (the loop's mean decode "
        "context and the profile's reference are in the JSON). Compare this run "
        "with `autoscale_capacity_one_word_prompts.md` (`--one-word-prompts`: the "
        "same loop with one-word prompts): the difference is what the prompts cost. "
        "The two right-hand columns reprice the same batch and K with the "
        "profile's own cost model, as a diagnosis (not the operator's model): at "
        "the loop's mean decode context (the profile's context slope), and then "
        "also with each prompt token priced like one verified token (the profile's "
        "per-verified-token slope at that batch size).",
        "",
        "What this checks: the capacity arithmetic, the profile's cost-model fit and "
        "acceptance estimate, and the pod's batching, acceptance sampling, prefill "
        "interleaving and queueing, against the model. What it does not: any real GPU.",
        "",
    ]
    return "\n".join(lines)


# --- the profile the operator would get -------------------------------------


def example_spec() -> SpeculativeDeploymentSpec:
    doc = yaml.safe_load(EXAMPLE.read_text())
    return SpeculativeDeploymentSpec.model_validate(doc["spec"])


def pool_profile(spec: SpeculativeDeploymentSpec, gpu: str, workdir: Path) -> ProfileSpec:
    """The profiling Job's command as the stand-in runs it, writing to a file."""
    fp = pool_fingerprint(spec, gpu_type=gpu, gpus_per_replica=1)
    args = emulation.profiler_args(profiler_args(spec, fp), gpu)
    out = workdir / f"profile-{gpu}.yaml"
    argv = [a for a in args if a != "--kubernetes"] + [f"--out={out}"]
    done = subprocess.run(
        [sys.executable, "-m", "specdeploy", *argv], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"profiling {gpu} failed ({done.returncode}): {done.stderr[-2000:]}")
    return load_profile(out).spec


# --- the serving pod ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Pod:
    proc: subprocess.Popen[bytes]
    url: str
    addon_url: str
    log: Path

    def modelled_seconds(self) -> float | None:
        found = re.findall(r"([0-9.]+) modelled GPU seconds", self.log.read_text(errors="replace"))
        return float(found[-1]) if found else None

    def behind_seconds(self) -> float | None:
        found = re.findall(r"host behind by ([0-9.]+) s", self.log.read_text(errors="replace"))
        return float(found[-1]) if found else None


@contextlib.contextmanager
def serving_pod(
    spec: SpeculativeDeploymentSpec,
    gpu: str,
    schedule: Sequence[Sequence[int]],
    workdir: Path,
    time_scale: float,
) -> Iterator[Pod]:
    """The emulated server with the operator's serving arguments and ``schedule`` mounted."""
    http, metrics = free_port(), free_port()
    sched = tuple((int(a), int(b), int(k)) for a, b, k in schedule)
    pool = ServingPool("pool", "pool-table", gpu, 1, 1, "bench", sched)
    args = [a for a in vllm_args(spec, pool) if not a.startswith("--port=")]
    table = workdir / f"table-{gpu}-{http}.json"
    table.write_text(PoolTable(policy=Policy.TABLE, schedule=sched).to_json())
    env = {
        **os.environ,
        PodEnv.TABLE_FILE.value: str(table),
        PodEnv.POLICY.value: Policy.TABLE.value,
        PodEnv.POOL.value: gpu,
        PodEnv.ALLOWED_K.value: allowed_k(spec.speculation.max_k),
        **emulation.serving_env(emulation.Ports(http, metrics), gpu),
        "SPECDEPLOY_EMULATED_TIME_SCALE": f"{time_scale:g}",
        "SPECDEPLOY_EMULATED_LOAD_SECONDS": "0.2",
    }
    log = workdir / f"server-{http}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", emulation.SERVER_MODULE, *args, f"--port={http}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    pod = Pod(proc, f"http://127.0.0.1:{http}", f"http://127.0.0.1:{metrics}", log)
    try:
        _wait_healthy(pod)
        yield pod
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(pod: Pod, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pod.proc.poll() is not None:
            raise RuntimeError(f"server exited: {pod.log.read_text()[-2000:]}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(pod.url + "/health", timeout=2) as got,
        ):
            if got.status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server never became healthy: {pod.log.read_text()[-2000:]}")


# --- the closed loop and its scrapes -------------------------------------------


def _final_tokens(pod: Pod) -> float:
    import urllib.request

    with urllib.request.urlopen(pod.url + "/metrics", timeout=10) as got:
        return _scalar(got.read().decode(), "vllm:generation_tokens_total")


def _scalar(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += float(s.value)
    return total


def _by_label(text: str, name: str, label: str) -> dict[int, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and label in s.labels:
                out[int(s.labels[label])] = out.get(int(s.labels[label]), 0.0) + float(s.value)
    return out


@dataclass(frozen=True)
class Scrape:
    wall: float
    generation_tokens: float
    running: float
    steps_by_k: dict[int, float]
    drafted: float
    accepted: float
    prompt_tokens: float


async def _scrape(session: Any, pod: Pod) -> Scrape:
    async with session.get(pod.url + "/metrics") as got:
        text = await got.text()
    async with session.get(pod.addon_url + "/metrics") as got:
        addon = await got.text()
    return Scrape(
        wall=time.perf_counter(),
        generation_tokens=_scalar(text, "vllm:generation_tokens_total"),
        running=_scalar(text, "vllm:num_requests_running"),
        steps_by_k=_by_label(addon, "specdeploy_steps_total", "k"),
        drafted=_scalar(text, "vllm:spec_decode_num_draft_tokens_total"),
        accepted=_scalar(text, "vllm:spec_decode_num_accepted_tokens_total"),
        prompt_tokens=_scalar(text, "vllm:prompt_tokens_total"),
    )


async def _first_tokens(session: Any, pod: Pod, count: int, *, poll_s: float) -> None:
    """Until ``count`` requests have their first token: the first requests' prompts
    (their done part included) are prefilled before the warm-up starts."""
    while True:
        async with session.get(pod.url + "/metrics") as got:
            text = await got.text()
        if _scalar(text, "vllm:time_to_first_token_seconds_count") >= count:
            return
        await asyncio.sleep(poll_s)


@dataclass(frozen=True)
class Loop:
    """How the closed loop's requests look."""

    output_tokens: tuple[int, int] = OUTPUT_TOKENS
    prompt: str | None = None
    """None: the load generator's prompts for the workload; else this text for every
    request (a diagnosis: one word leaves almost no prefill)."""
    seed: int = 0


async def closed_loop(
    pod: Pod,
    workload: str,
    batch: int,
    *,
    warmup_s: float,
    window_s: float,
    loop: Loop,
) -> tuple[list[Scrape], list[Any]]:
    """``batch`` workers for warm-up plus ``WINDOWS`` windows (wall), scraped at each edge."""
    import aiohttp

    from specdeploy.cli.loadgen import client
    from specdeploy.cli.loadgen.config import MAX_DURATION_S, LoadConfig
    from specdeploy.cli.loadgen.request import RequestSpec
    from specdeploy.cli.loadgen.runner import LoadRunner

    output_tokens = loop.output_tokens
    config = LoadConfig(
        url=pod.url,
        model=SERVED,
        concurrency=batch,
        duration_s=MAX_DURATION_S,  # interrupted after the last scrape
        workload=workload,
        max_tokens=output_tokens[1],
        ignore_eos=True,
        timeout_s=600.0,
        seed=loop.seed,
    )
    rng = random.Random(loop.seed)
    runner = LoadRunner(config)
    sent = 0
    async with client.open_session(batch) as session, aiohttp.ClientSession() as scraper:

        async def send(req: RequestSpec) -> Any:
            nonlocal sent
            sent += 1
            tokens, done = rng.randint(*output_tokens), 0
            if sent <= batch:
                tokens, done = first_request_split(rng, output_tokens)
            body = {**req.body, "max_tokens": tokens}
            prompt = str(req.body["messages"][0]["content"])
            if loop.prompt is not None:  # diagnosis only: how much prefill costs
                prompt = loop.prompt
            # One word is one token to the emulated server (e2e/emulated/text.py).
            body["messages"] = [{"role": "user", "content": prompt + " so" * done}]
            varied = dataclasses.replace(req, body=body)
            return await client.stream_request(
                session, varied, timeout_s=config.timeout_s, clock=time.perf_counter
            )

        load = asyncio.create_task(runner.run_with(send))
        await _first_tokens(scraper, pod, batch, poll_s=window_s / 10)
        steady_from = time.perf_counter()
        await asyncio.sleep(warmup_s)
        scrapes = [await _scrape(scraper, pod)]
        for _ in range(WINDOWS):
            await asyncio.sleep(max(0.0, scrapes[-1].wall + window_s - time.perf_counter()))
            scrapes.append(await _scrape(scraper, pod))
        runner.interrupt()
        run = await load
    # TPOT of the requests sent once every first request was decoding: the first ones
    # decoded beside the others' long prefills.
    return scrapes, [r for r in run.results if r.measured.sent_at >= steady_from]


def measured_figures(
    scrapes: Sequence[Scrape], results: Sequence[Any], time_scale: float
) -> dict[str, Any]:
    """Tokens/s, TPOT, batch and K shares in the emulated GPU's time from one closed loop."""
    rates = window_rates([(s.wall, s.generation_tokens) for s in scrapes])
    tokens = interval([r * time_scale for r in rates])
    tpots = tpot_window_means(
        [(r.measured.ended_at, r.measured.tpot_s) for r in results if r.measured.ok],
        [s.wall for s in scrapes],
        time_scale,
    )
    first, last = scrapes[0], scrapes[-1]
    steps = {k: last.steps_by_k.get(k, 0.0) - first.steps_by_k.get(k, 0.0) for k in last.steps_by_k}
    drafted = last.drafted - first.drafted
    return {
        "tokensPerSecond": tokens.as_dict(1),
        "tpotSeconds": interval(tpots).as_dict(6) if tpots else None,
        "tpotRequests": sum(
            r.measured.ok and scrapes[0].wall <= r.measured.ended_at < scrapes[-1].wall
            for r in results
        ),
        "promptTokensPerOutputToken": round(
            (last.prompt_tokens - first.prompt_tokens)
            / max(last.generation_tokens - first.generation_tokens, 1.0),
            4,
        ),
        "windows": len(rates),
        "meanRunning": round(sum(s.running for s in scrapes) / len(scrapes), 2),
        "kShareOfSteps": k_shares(steps),
        "acceptedPerDraftToken": round((last.accepted - first.accepted) / drafted, 4)
        if drafted
        else None,
        "timeScale": round(time_scale, 3),
        "failedRequests": sum(not r.measured.ok for r in results),
    }


# --- one case, and the whole run ------------------------------------------------


def predictions(
    spec: ProfileSpec, workload: Workload, per_position: Sequence[float], targets_s: Sequence[float]
) -> tuple[list[tuple[int, int, int]], list[Capacity | None]]:
    """The schedule in force for the workload and the capacity per TPOT target.

    ``chat`` is the traffic the profile describes: its grid and its schedule.
    ``random`` collapses acceptance: the telemetry loop's live grid and the
    schedule it re-derives from it (``specdeploy.runtime.live``), over the pods' K set.
    """
    if workload is Workload.CHAT:
        if spec.schedule is None:
            raise ValueError("the pool's profile has no schedule")
        grid = goodput_grid(spec)
        schedule = [(int(a), int(b), int(k)) for a, b, k in spec.schedule]
    else:
        grid = live_goodput_grid(spec, per_position)
        schedule = derive_live_schedule(spec, grid, allowed=range(spec.fingerprint.max_k + 1))
    return schedule, [replica_capacity(grid, schedule, tpot_target_s=t) for t in targets_s]


@dataclass(frozen=True)
class Settings:
    """One run of the bench (the command line)."""

    targets_ms: tuple[float, ...] = TPOT_TARGETS_MS
    gpus: tuple[str, ...] = ()
    """Empty: the local cluster's default fleet."""
    workloads: tuple[Workload, ...] = WORKLOADS
    loop: Loop = Loop()


def run_case(
    spec: SpeculativeDeploymentSpec,
    pool: PoolCase,
    cap: Capacity,
    al: float,
    workdir: Path,
    loop: Loop,
) -> dict[str, Any]:
    """Drive a fresh pod at the predicted batch size; the measured figures.

    A host too busy to pace the pod (the server lost more than ``MAX_BEHIND_SHARE``
    of the run's wall time) makes the wall rates say nothing about the model: the
    case runs again at twice the time scale, once.
    """
    scale = time_scale_for(cap, al)
    for attempt in (1, 2):
        figures = _drive(spec, pool, cap, workdir, loop, scale)
        figures["attempt"] = attempt
        if host_kept_up(figures["hostBehindSeconds"], figures["wallSeconds"]):
            break
        scale *= 2
    return figures


def host_kept_up(behind_s: float | None, wall_s: float, share: float = MAX_BEHIND_SHARE) -> bool:
    """Whether the pod kept pace: it lost at most ``share`` of the wall time (unknown: no)."""
    return behind_s is not None and behind_s <= share * wall_s


def _drive(
    spec: SpeculativeDeploymentSpec,
    pool: PoolCase,
    cap: Capacity,
    workdir: Path,
    loop: Loop,
    scale: float,
) -> dict[str, Any]:
    request_s = sum(loop.output_tokens) / 2 * cap.tpot_seconds * scale
    started = time.perf_counter()
    with serving_pod(spec, pool.gpu, pool.schedule, workdir, scale) as pod:
        scrapes, results = asyncio.run(
            closed_loop(
                pod,
                pool.workload.value,
                cap.batch_size,
                warmup_s=WARMUP_REQUEST_SHARE * request_s,
                window_s=WINDOW_REQUEST_SHARE * request_s,
                loop=loop,
            )
        )
        figures = measured_figures(scrapes, results, scale)
        final = _final_tokens(pod)
    figures["wallSeconds"] = round(time.perf_counter() - started, 1)
    figures["hostBehindSeconds"] = pod.behind_seconds()
    modelled = pod.modelled_seconds()
    if modelled:
        # The whole run (warm-up and the interrupted tail too) in the engine's own
        # modelled time: what the pod did, whatever the host's pacing.
        figures["wholeRunTokensPerModelledSecond"] = round(final / modelled, 1)
    return figures


@dataclass(frozen=True)
class PoolCase:
    """A pool on one GPU type serving one workload: what the predictions start from."""

    gpu: str
    workload: Workload
    profile: ProfileSpec
    per_position: tuple[float, ...]
    schedule: list[tuple[int, int, int]]


def _predicted(cap: Capacity) -> dict[str, Any]:
    return {
        "batchSize": cap.batch_size,
        "k": cap.k,
        "tokensPerSecond": round(cap.tokens_per_second, 1),
        "tpotSeconds": round(cap.tpot_seconds, 6),
        "limitedBy": cap.limited_by.value,
    }


def _diagnosis(
    profile: ProfileSpec, cap: Capacity, al: float, measured: Mapping[str, Any], loop: Loop
) -> dict[str, Any]:
    """The prediction at the same batch and K with the measured prefill priced in, and
    at the loop's mean context (the profile's grid holds its own reference context)."""
    rho = measured["promptTokensPerOutputToken"]
    context = mean_decode_context(rho * sum(loop.output_tokens) / 2, loop.output_tokens)
    itl = float(modelled_itl_grid(profile, context_per_sequence=context)[cap.batch_size, cap.k])
    model = cost_model(profile)
    got = measured["tokensPerSecond"]["mean"]

    def rate(prompt_per_output: float) -> float:
        beta = model.beta_at(cap.batch_size)
        return prefill_aware_rate(
            itl, beta, batch=cap.batch_size, al=al, prompt_per_output=prompt_per_output
        )

    return {
        "meanDecodeContext": round(context, 1),
        "profileReferenceContext": round(model.reference_context, 1),
        "contextAwareTokensPerSecond": round(rate(0.0), 1),
        "contextAwareError": round(relative_error(rate(0.0), got), 4),
        "prefillAwareTokensPerSecond": round(rate(rho), 1),
        "prefillAwareError": round(relative_error(rate(rho), got), 4),
    }


def pool_cases(
    spec: SpeculativeDeploymentSpec, gpu: str, workdir: Path, workloads: Sequence[Workload]
) -> Iterator[PoolCase]:
    """The pool's profile, and per workload the acceptance and schedule it serves with."""
    profile = pool_profile(spec, gpu, workdir)
    preset, _ = emulated_preset(spec.model.name, spec.speculation.method.value, gpu)
    classes = class_models(preset)
    max_k = profile.fingerprint.max_k
    for workload in workloads:
        if workload is Workload.CHAT:
            rates = tuple(profile.acceptance.per_position)
        else:  # the live acceptance: the emulated traffic class's own
            rates = tuple(classes[workload].acceptance.nominal())[:max_k]
        yield PoolCase(gpu, workload, profile, rates, [])


def measure_pool(
    spec: SpeculativeDeploymentSpec, case: PoolCase, workdir: Path, settings: Settings
) -> Iterator[dict[str, Any]]:
    """One row per TPOT target; a target whose operating point repeats an earlier one's
    (a batch-limited pool) reuses that measurement."""
    schedule, caps = predictions(
        case.profile, case.workload, case.per_position, [t / 1000 for t in settings.targets_ms]
    )
    case = dataclasses.replace(case, schedule=schedule)
    als = acceptance_lengths(case.per_position, case.profile.fingerprint.max_k)
    done: dict[tuple[int, int], dict[str, Any]] = {}
    for target, cap in zip(settings.targets_ms, caps, strict=True):
        row: dict[str, Any] = {
            "gpu": case.gpu,
            "workload": case.workload.value,
            "tpotTargetMs": target,
            "schedule": [list(r) for r in schedule],
            "acceptancePerPosition": [round(a, 4) for a in case.per_position],
        }
        if cap is not None:
            point = (cap.batch_size, cap.k)
            if point not in done:
                measured = run_case(spec, case, cap, float(als[cap.k]), workdir, settings.loop)
                done[point] = measured
            else:
                row["sameOperatingPointAs"] = "an earlier target (measured once)"
            al = float(als[cap.k])
            row["predicted"] = _predicted(cap)
            row["measured"] = done[point]
            got = done[point]["tokensPerSecond"]["mean"]
            row["relativeError"] = round(relative_error(cap.tokens_per_second, got), 4)
            row["diagnosis"] = _diagnosis(case.profile, cap, al, done[point], settings.loop)
        print(json.dumps(_brief(row)), flush=True)
        yield row


def _brief(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("gpu", "workload", "tpotTargetMs", "predicted", "relativeError")
    return {k: row.get(k) for k in keys}


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True
    )
    return done.stdout.decode().strip() + ("+dirty" if dirty.stdout.strip() else "")


def summary(cases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How many measured cases are within the target, and the largest error."""
    measured = [c for c in cases if "relativeError" in c]
    errors = [abs(c["relativeError"]) for c in measured]
    return {
        "measured": len(errors),
        "within": sum(e <= TARGET_ERROR for e in errors),
        "maxAbsError": round(max(errors), 4) if errors else None,
        "target": TARGET_ERROR,
        "meanSignedError": mean_signed_errors(measured),
    }


def mean_signed_errors(measured: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The mean signed error of the prediction and of the two diagnosis repricings."""
    if not measured:
        return {}
    picks: dict[str, tuple[str, ...]] = {
        "replica_capacity": ("relativeError",),
        "at loop context": ("diagnosis", "contextAwareError"),
        "and prefill priced": ("diagnosis", "prefillAwareError"),
    }

    def pick(case: Mapping[str, Any], path: tuple[str, ...]) -> float:
        value: Any = case
        for key in path:
            value = value[key]
        return float(value)

    return {
        name: round(sum(pick(c, path) for c in measured) / len(measured), 4)
        for name, path in picks.items()
    }


def run(settings: Settings) -> dict[str, Any]:
    started = time.perf_counter()
    spec = example_spec()
    gpus = settings.gpus or tuple(p.gpu.product for p in parse_fleet(DEFAULT_SPEC))
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="capbench-") as tmp:
        workdir = Path(tmp)
        for gpu in gpus:
            for case in pool_cases(spec, gpu, workdir, settings.workloads):
                cases.extend(measure_pool(spec, case, workdir, settings))
    return {
        "what": "replica_capacity predictions vs the emulated vLLM pod's throughput (MODELLED)",
        "commit": _commit(),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "outputTokens": list(settings.loop.output_tokens),
        "prompts": "one word each (diagnosis)" if settings.loop.prompt else "the loadgen's own",
        "cases": cases,
        "summary": summary(cases),
        "wallSeconds": round(time.perf_counter() - started, 1),
    }


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, Path]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--tpot-ms", default=",".join(f"{t:g}" for t in TPOT_TARGETS_MS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu", action="append", default=[], help="default: the local fleet's")
    p.add_argument("--workload", action="append", default=[], choices=[w.value for w in WORKLOADS])
    p.add_argument("--one-word-prompts", action="store_true", help="diagnosis: (almost) no prefill")
    p.add_argument("--output-tokens", default=",".join(str(n) for n in OUTPUT_TOKENS))
    args = p.parse_args(argv)
    lo, hi = (int(n) for n in args.output_tokens.split(","))
    loop = Loop((lo, hi), "hello" if args.one_word_prompts else None, args.seed)
    settings = Settings(
        targets_ms=tuple(float(t) for t in args.tpot_ms.split(",") if t.strip()),
        gpus=tuple(args.gpu),
        workloads=tuple(Workload(w) for w in args.workload) or WORKLOADS,
        loop=loop,
    )
    return settings, args.out


def result_stem(loop: Loop) -> str:
    """The results' file name: the default loop's, or one that says how it differs."""
    stem = "autoscale_capacity"
    if loop.prompt is not None:
        stem += "_one_word_prompts"
    if loop.output_tokens != OUTPUT_TOKENS:
        stem += "_outputs_{}_{}".format(*loop.output_tokens)
    return stem


def render(path: Path) -> None:
    """Rewrite the table beside a recorded JSON (no new measurement)."""
    doc = json.loads(path.read_text())
    path.with_suffix(".md").write_text(markdown(doc))


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--render"]:
        for name in argv[1:]:
            render(Path(name))
        return 0
    settings, out = parse_args(argv)
    doc = run(settings)
    doc["command"] = " ".join(["python bench/autoscale_capacity.py", *argv])
    out.mkdir(parents=True, exist_ok=True)
    stem = result_stem(settings.loop)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
