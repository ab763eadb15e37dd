"""Per-step cost of the K policies in CPython: choose_k and observe, in ns per call.

The target (DESIGN.md, "The runtime"): choosing K is an array index, about a
microsecond at most, because vLLM's scheduler calls it once per step on the
critical path. The loop is realistic: the batch size walks (requests join and
finish a few at a time, with occasional bursts), each step's acceptance
counts are drawn for the K the policy chose, and observe() includes the
table rebuild every ``recompute_interval`` steps, amortised.

    python bench/bench_hot_path.py [--profile examples/profile-example.yaml]
                                   [--steps 20000] [--out bench/results/hot_path.json]

``addon.choose_k`` is the same policy behind the add-on's controller (what
vLLM's ``schedule()`` reaches through the replaced lookup), ``addon.step_done``
what the add-on does in ``update_from_output``: conditional counts from the
per-request pairs, the policy's observe, and the Prometheus series.

The numbers include the Python for-loop around each call; the ``noop``
entry measures that loop calling an empty method, for reference. The
machine's load average is recorded: on a shared box every figure scales with
it, so compare entries of one run with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specdeploy.runtime.goodput import conditional_counts
from specdeploy.runtime.policy import AdaptivePolicy, TablePolicy
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.policy.config import AdaptiveConfig
from specdeploy.runtime.profile import load_profile
from specdeploy.runtime.schedule import derive_schedule
from specdeploy.runtime.vllm_addon.controller import KController
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from specdeploy.runtime.vllm_addon.table_source import EngineShape, load_table

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE = ROOT / "examples" / "profile-example.yaml"
DEFAULT_OUT = ROOT / "bench" / "results" / "hot_path.json"

Step = tuple[int, int, float, list[int], list[int]]
Pairs = list[tuple[int, int]]


def batch_size_walk(steps: int, max_bs: int, rng: random.Random) -> list[int]:
    """Batch sizes that jitter by a few per step and sometimes jump (a burst)."""
    sizes, bs = [], max_bs // 4
    for _ in range(steps):
        bs += rng.randint(-3, 3)
        if rng.random() < 0.002:
            bs = rng.randint(1, max_bs)
        bs = min(max(bs, 1), max_bs)
        sizes.append(bs)
    return sizes


def recorded_steps(
    policy: AdaptivePolicy, sizes: Sequence[int], rng: random.Random
) -> tuple[list[Step], list[Pairs]]:
    """Run the policy once and record what observe() would be fed at each step,
    and the per-request (drafted, accepted) pairs the add-on reads from vLLM."""
    rates = policy.estimates().acceptance_prior
    steps: list[Step] = []
    pairs: list[Pairs] = []
    for bs in sizes:
        k = policy.choose_k(bs)
        per_seq = [_accepted(rates, k, rng) for _ in range(bs)]
        drafted, accepted = conditional_counts(per_seq, k)
        seconds = 0.005 + 0.0001 * bs * (k + 1)
        policy.observe(StepRecord(bs, k, seconds, drafted, drafted, accepted))
        steps.append((bs, k, seconds, drafted, accepted))
        pairs.append([(k, a) for a in per_seq] if k else [])
    return steps, pairs


def addon_controller(doc: Any, max_k: int, max_bs: int) -> KController:
    """The add-on's controller (metrics on) serving the profile's adaptive policy."""
    spec = doc.spec
    shape = EngineShape(max_k, max_bs, tuple(range(max_k + 1)))
    schedule = spec.schedule or derive_schedule(spec, max_bs)
    table = {"policy": "adaptive", "maxK": max_k, "schedule": [list(r) for r in schedule]}
    profile = json.dumps(doc.to_document()["spec"]).encode()
    loaded = load_table(
        json.dumps(table).encode(),
        profile,
        shape,
        default_policy="adaptive",
        adaptive=AdaptiveConfig(),
    )
    controller = KController([0] * (max_bs + 1), shape, AddonMetrics("bench", max_k))
    controller.install(loaded)
    return controller


def _accepted(rates: Sequence[float], k: int, rng: random.Random) -> int:
    n = 0
    while n < k and rng.random() < rates[n]:
        n += 1
    return n


def ns_per_call(loop: Callable[[], None], calls: int, repeat: int = 7) -> float:
    """Best of ``repeat`` runs of ``loop`` (which makes ``calls`` calls), in ns per call."""
    return min(timeit.repeat(loop, number=1, repeat=repeat)) / calls * 1e9


def _display(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else path)


class _Noop:
    def call(self, batch_size: int) -> int:
        return batch_size


def measure(profile_path: Path, n_steps: int, seed: int) -> dict[str, Any]:
    doc = load_profile(profile_path)
    rng = random.Random(seed)
    warm = AdaptivePolicy.from_profile(doc)
    sizes = batch_size_walk(n_steps, warm.max_batch_size, rng)
    steps, pairs = recorded_steps(warm, sizes, rng)
    adaptive = AdaptivePolicy.from_profile(doc)
    for bs, k, seconds, drafted, accepted in steps:  # same learnt state as in serving
        adaptive.observe(StepRecord(bs, k, seconds, drafted, drafted, accepted))
    table = TablePolicy.from_profile(doc)
    noop = _Noop()

    def loop_of(fn: Callable[[int], int]) -> Callable[[], None]:
        def run() -> None:
            for bs in sizes:
                fn(bs)

        return run

    observer = AdaptivePolicy.from_profile(doc)

    def observe_loop() -> None:
        observe = observer.observe
        for bs, k, seconds, drafted, accepted in steps:
            observe(StepRecord(bs, k, seconds, drafted, drafted, accepted))

    max_k = doc.spec.fingerprint.max_k
    addon = addon_controller(doc, max_k, adaptive.max_batch_size)
    for (bs, k, seconds, _, _), step_pairs in zip(steps, pairs, strict=True):
        addon.step_done(bs, k, seconds, step_pairs)

    fed = addon_controller(doc, max_k, adaptive.max_batch_size)

    def step_done_loop() -> None:
        done = fed.step_done
        for (bs, k, seconds, _, _), step_pairs in zip(steps, pairs, strict=True):
            done(bs, k, seconds, step_pairs)

    refresher = AdaptivePolicy.from_profile(doc)
    refresh_us = ns_per_call(refresher.refresh, 1, repeat=200) / 1e3
    return {
        "profile": str(
            profile_path.relative_to(ROOT) if profile_path.is_relative_to(ROOT) else profile_path
        ),
        "steps": n_steps,
        "max_batch_size": adaptive.max_batch_size,
        "allowed_k": list(adaptive.allowed_k),
        "recompute_interval": adaptive.config.recompute_interval,
        "ns_per_call": {
            "adaptive.choose_k": round(ns_per_call(loop_of(adaptive.choose_k), n_steps), 1),
            "adaptive.observe": round(ns_per_call(observe_loop, n_steps), 1),
            "table.choose_k": round(ns_per_call(loop_of(table.choose_k), n_steps), 1),
            "addon.choose_k": round(ns_per_call(loop_of(addon.choose_k), n_steps), 1),
            "addon.step_done": round(ns_per_call(step_done_loop, n_steps), 1),
            "noop": round(ns_per_call(loop_of(noop.call), n_steps), 1),
        },
        "refresh_us": round(refresh_us, 1),
        "adaptive": {
            "switches": adaptive.switches,
            "exploration_steps": adaptive.exploration_steps,
            "generation": adaptive.generation,
        },
        "target_ns": {"adaptive.choose_k": 2000},
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    result = measure(args.profile, args.steps, args.seed)
    for name, ns in result["ns_per_call"].items():
        print(f"{name:20s} {ns:8.1f} ns/call")
    every = result["recompute_interval"]
    print(f"{'refresh':20s} {result['refresh_us']:8.1f} us (every {every} steps)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
