"""vLLM's OpenAI server and vLLM's own benchmark client, as the CPU benchmarks run them.

One place for how a measured benchmark starts the server a serving pod runs
(the CPU build, SmolLM2-135M, n-gram drafts, the table or a fixed K, the
add-on through ``--scheduler-cls``), renders the prompt mix, and drives it
with the code behind ``vllm bench serve``. Imported by the scripts beside
it and by ``tests/model/test_profiler_regime.py``; vLLM itself is imported
lazily, so the module loads without the vLLM venv.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specdeploy.runtime.profiler.vllm_backend import cpu_dtype

ADDON = "specdeploy.runtime.vllm_addon.scheduler_factory"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text: str = response.read().decode()
        return text


def parse(text: str) -> Samples:
    """Prometheus text format → {(name, labels): value}."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        pairs = (item.partition("=") for item in rest.rstrip("}").replace('"', "").split(","))
        out[(name, frozenset((k, v) for k, _, v in pairs if k))] = float(value)
    return out


def write_prompts(model: str, path: Path, limit: int) -> int:
    """MT-Bench prompts rendered with the model's chat template, as a ShareGPT-shaped file.

    The benchmark client's ShareGPT loader sends the first turn's text as the
    prompt as it is (so the rendered chat, special tokens included, reaches
    the model as the profiler renders it); its ``custom`` loader would need
    pandas, which the CPU venv does not carry.
    """
    from transformers import AutoTokenizer

    from specdeploy.runtime.profiler.datasets import load_conversations
    from specdeploy.runtime.profiler.vllm_backend import default_cache_dir

    tokenizer = AutoTokenizer.from_pretrained(model)
    answers: dict[str, str] = {}
    for found in sorted((default_cache_dir() / "answers").glob("*SmolLM2*mt-bench*.json")):
        answers.update(json.loads(found.read_text()))
    rows = []
    for conversation in load_conversations("mt-bench", limit=limit):
        rows.append(conversation.messages(0, []))
        if len(conversation.turns) > 1 and conversation.id in answers:
            rows.append(conversation.messages(1, [answers[conversation.id]]))
    entries = []
    for messages in rows:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        entries.append(
            {"conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "-"}]}
        )
    path.write_text(json.dumps(entries))
    return len(rows)


def speculative_config(profile: dict[str, Any], k: int | None = None) -> dict[str, Any]:
    """The n-gram speculative config a pod runs: the profile's table, or fixed ``k``.

    With ``k`` None: ``num_speculative_tokens`` is the profile's maxK and its
    schedule is vLLM's own ``num_speculative_tokens_per_batch_size``; with
    ``k``: K=``k`` at every batch size (no table).
    """
    spec = profile["spec"]
    config: dict[str, Any] = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    if k is not None:
        config["num_speculative_tokens"] = k
        return config
    config["num_speculative_tokens"] = int(spec["fingerprint"]["maxK"])
    config["num_speculative_tokens_per_batch_size"] = [
        list(map(int, row)) for row in spec["schedule"]
    ]
    return config


def engine_command(
    model: str, port: int, speculative: dict[str, Any] | None, scheduler_cls: str | None = None
) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server ...`` as the serving pod runs it (on CPU)."""
    cmd = [
        *(sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model),
        *("--served-model-name", "smollm2", "--port", str(port), "--host", "127.0.0.1"),
        *("--dtype", cpu_dtype(), "--max-model-len", "2048", "--max-num-seqs", "16"),
        *("--enforce-eager", "--gpu-memory-utilization", "0.5"),
    ]
    if speculative is not None:
        cmd += ["--speculative-config", json.dumps(speculative)]
    if scheduler_cls is not None:
        cmd += ["--scheduler-cls", scheduler_cls]
    return cmd


def addon_environment(
    profile: dict[str, Any],
    policy: str,
    folder: Path,
    metrics_port: int,
    allowed_k: str = "all",
    timing: bool = False,
) -> dict[str, str]:
    """The pool's table and profile files as the operator mounts them, and the add-on's env."""
    spec = profile["spec"]
    table = [list(map(int, row)) for row in spec["schedule"]]
    doc = {
        "policy": policy,
        "maxK": int(spec["fingerprint"]["maxK"]),
        "fixedK": None,
        "schedule": table,
    }
    (folder / "table.json").write_text(json.dumps(doc))
    (folder / "profile.json").write_text(json.dumps(spec))
    return {
        "SPECDEPLOY_TABLE_FILE": str(folder / "table.json"),
        "SPECDEPLOY_POOL": "cpu",
        "SPECDEPLOY_ALLOWED_K": allowed_k,
        "SPECDEPLOY_METRICS_PORT": str(metrics_port),
        "SPECDEPLOY_METRICS_ADDR": "127.0.0.1",
        "SPECDEPLOY_ADDON_TIMING": "1" if timing else "0",
    }


@contextmanager
def running(cmd: list[str], env: dict[str, str], log: Path, port: int) -> Iterator[float]:
    """Start a server, wait until ``/health`` answers, yield its start seconds; stop it after."""
    full = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        **env,
    }
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=full, stdout=out, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited {proc.returncode}: {log.read_text()[-3000:]}"
                )
            try:
                get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if time.perf_counter() - started > 600:
                    raise RuntimeError(
                        f"the server is not healthy: {log.read_text()[-3000:]}"
                    ) from None
                time.sleep(1)
        yield round(time.perf_counter() - started, 1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def server(
    model: str,
    profile: dict[str, Any],
    policy: str | None,
    folder: Path,
    log: Path,
    allowed_k: str = "all",
    timing: bool = True,
    speculative: bool = True,
    fixed_k: int | None = None,
) -> Iterator[dict[str, Any]]:
    """vLLM's OpenAI server with the profile's table, and the add-on serving ``policy``.

    ``allowed_k``: the add-on's K set (``SPECDEPLOY_ALLOWED_K``); ``timing``: its
    self-timing of the hooks (``SPECDEPLOY_ADDON_TIMING``); without
    ``speculative``, plain vLLM (no speculation, no add-on: ``policy`` None);
    ``fixed_k``: vLLM's static ``num_speculative_tokens`` (no table, no add-on).
    """
    if policy is not None and not speculative:
        raise ValueError("the add-on needs a speculative config")
    if fixed_k is not None and (policy is not None or not speculative):
        raise ValueError("fixed_k is plain vLLM with a static K: no add-on, speculation on")
    http, metrics = free_port(), free_port()
    env: dict[str, str] = {}
    if policy is not None:
        env = addon_environment(profile, policy, folder, metrics, allowed_k, timing)
    cmd = engine_command(
        model,
        http,
        speculative_config(profile, fixed_k) if speculative else None,
        ADDON if policy is not None else None,
    )
    with running(cmd, env, log, http) as start_s:
        yield {"http": http, "metrics": metrics if policy is not None else None, "start_s": start_s}


def bench_client(
    port: int,
    model: str,
    prompts: Path,
    concurrency: int,
    n: int,
    tokens: int,
    *,
    seed: int = 0,
    ignore_eos: bool = False,
) -> dict[str, Any]:
    """vLLM's own benchmark client (``vllm bench serve``), closed loop at ``concurrency``."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [
            *("--backend", "vllm", "--host", "127.0.0.1", "--port", str(port)),
            *("--model", "smollm2", "--tokenizer", model, "--dataset-name", "sharegpt"),
            *("--dataset-path", str(prompts), "--sharegpt-output-len", str(tokens)),
            *("--num-prompts", str(n)),
            *("--max-concurrency", str(concurrency), "--temperature", "0", "--seed", str(seed)),
            *(["--ignore-eos"] if ignore_eos else []),
            "--disable-tqdm",
        ]
    )
    result: dict[str, Any] = main(args)
    keep = ("completed", "duration", "total_output_tokens", "output_throughput")
    found = {k: result[k] for k in keep if k in result}
    for k in ("mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "mean_ttft_ms"):
        if k in result:
            found[k] = result[k]
    return found
