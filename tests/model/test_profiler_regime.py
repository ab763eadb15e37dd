"""The profiler measures in the serving regime: its plain-decoding step is the server's TPOT.

Issue 13 found the recorded CPU profile ~10x slower than what a user of
vLLM's OpenAI server sees on the same box: the profiler's in-process engine
bound OpenMP to every core with Intel OpenMP's 200 ms spin, where the server
reserves a core for its scheduler process and sets a 5 ms block time
(``vllm_backend.serving_cpu_threads``). This test holds the two together:
vLLM's OpenAI server without speculation, driven by vLLM's own benchmark
client at concurrency 1 (MT-Bench prompts, 128 output tokens), against the
profiler's plain-decoding cell at batch size 1 on the same machine; the step
time must lie within 15% of the client's median TPOT.

Concurrency 1 because there the two measure the same thing: TPOT leaves the
first token (the prefill) out, and no other request's prefill lands in a
decode step. At concurrency 4 the server's TPOT also carries the prefills
of arriving requests and the frontend's work on the scheduler's core, which
the profiler's pure decode steps leave out: measured here 0.73-0.96 of TPOT
and 0.90-1.09 of the median inter-token latency, under a neighbour's load.

A pair that misses is measured once more and both pairs are reported (the
rule ``bench/cpu_dsd.py`` applies to its sanity check): on this box one
pair's ratio moved between 0.81 and 0.94 with nothing else running
(2026-12-01, step 37.0 ms against a 45.6 ms TPOT), more than a single pair
can resolve against the 15% bound. The old thread settings give 2.0x, which
no second pair brings within it.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import VenvRunner

# Two engines and a measured ratio, its subprocess bounded at 20 min: nightly only.
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]

CONCURRENCY = 1
TOLERANCE = 0.15

SCRIPT = """
import json, sys, tempfile
from pathlib import Path
from bench.vllm_server import bench_client, server, write_prompts
from specdeploy.runtime.profiler.backend import EngineOptions
from specdeploy.runtime.profiler.vllm_backend import VllmBackend

model, concurrency = sys.argv[1], int(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    prompts = folder / "prompts.json"
    write_prompts(model, prompts, 40)
    profile = {"spec": {"fingerprint": {"maxK": 1}, "schedule": [[1, 16, 1]]}}
    with server(model, profile, None, folder, folder / "serve.log",
                speculative=False) as up:
        bench_client(up["http"], model, prompts, concurrency, 1, 32)  # warm-up
        client = bench_client(up["http"], model, prompts, concurrency, 4, 128)
options = EngineOptions(model=model, method="ngram", max_k=1, max_batch_size=16)
backend = VllmBackend(options, plain=True)
try:
    sample = backend.measure(concurrency, 0, 64)
finally:
    backend.close()
steps = list(sample.step_seconds)
print(json.dumps({"tpot_ms": client["median_tpot_ms"], "itl_ms": client["median_itl_ms"],
                  "step_ms": 1000 * sum(steps) / len(steps), "steps": len(steps)}))
"""


ATTEMPTS = 2


def test_the_plain_decoding_step_is_the_servers_tpot(in_venv: VenvRunner, smollm2: str) -> None:
    pairs = []
    for _ in range(ATTEMPTS):
        done = in_venv("-c", SCRIPT, smollm2, str(CONCURRENCY), timeout=1200)
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found["steps"] >= 64
        found["ratio"] = round(found["step_ms"] / found["tpot_ms"], 3)
        pairs.append(found)
        if abs(found["ratio"] - 1.0) <= TOLERANCE:
            break
    assert abs(pairs[-1]["ratio"] - 1.0) <= TOLERANCE, pairs
