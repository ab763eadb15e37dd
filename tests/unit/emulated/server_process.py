"""The emulated vLLM server as a subprocess on free loopback ports, and a small HTTP client.

Tests start the real entry point (``python -m e2e.emulated.vllm_serve``) the
kubelet stand-in runs, with a time scale that makes modelled seconds short,
and talk to it over HTTP as a load generator would.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.paths import ROOT

ADDON = "specdeploy.runtime.vllm_addon.scheduler_factory"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SERVED = "llama-8b"
TIME_SCALE = "0.02"
"""50x faster than real time: an 8B step of ~8 modelled ms takes ~0.2 ms."""
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def speculative_config(schedule: Sequence[Sequence[int]] | None, max_k: int = 5) -> str:
    doc: dict[str, Any] = {"method": "eagle3", "num_speculative_tokens": max_k}
    if schedule is not None:
        doc["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
    return json.dumps(doc)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the series named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    found = [v for (n, lv), v in samples.items() if n == name and want <= set(lv)]
    if not found:
        raise KeyError(f"no series {name}{labels or ''}")
    return sum(found)


@dataclass
class Response:
    status: int
    body: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[Any]:
        """The SSE ``data:`` payloads, JSON-decoded except the final ``[DONE]``."""
        out: list[Any] = []
        for line in self.body.decode().splitlines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                out.append(data if data == "[DONE]" else json.loads(data))
        return out


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path

    def request(
        self,
        method: str,
        path: str,
        body: bytes | Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        port: int | None = None,
        timeout: float = 30.0,
    ) -> Response:
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        data = json.dumps(body).encode() if isinstance(body, Mapping) else body
        try:
            conn.request(
                method,
                path,
                body=data,
                headers={"Content-Type": "application/json", **(headers or {})},
            )
            got = conn.getresponse()
            return Response(got.status, got.read(), dict(got.getheaders()))
        finally:
            conn.close()

    def post(self, path: str, body: bytes | Mapping[str, Any], **headers: str) -> Response:
        return self.request(
            "POST", path, body, {k.replace("_", "-"): v for k, v in headers.items()}
        )

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def metrics(self) -> Samples:
        return parse_metrics(self.get("/metrics").body.decode())

    def addon_metrics(self) -> Samples:
        return parse_metrics(self.request("GET", "/metrics", port=self.metrics_port).body.decode())

    def output(self) -> str:
        return self.log.read_text()

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def serve_args(
    port: int,
    schedule: Sequence[Sequence[int]] | None,
    *,
    addon: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """What the operator's builder gives a serving container (``vllm_args``), on ``port``."""
    args = [
        MODEL,
        "--revision=main",
        f"--served-model-name={SERVED}",
        "--dtype=bfloat16",
        f"--port={port}",
        "--tensor-parallel-size=1",
        "--shutdown-timeout=10",
    ]
    if schedule is not None:
        args.append(f"--speculative-config={speculative_config(schedule)}")
        if addon:
            args.append(f"--scheduler-cls={ADDON}")
    return [*args, "--max-model-len=8192", *extra]


def base_env(tmp: Path, metrics_port: int, **overrides: str) -> dict[str, str]:
    env = {
        "SPECDEPLOY_TABLE_FILE": str(tmp / "table.json"),
        "SPECDEPLOY_POLICY": "table",
        "SPECDEPLOY_METRICS_PORT": str(metrics_port),
        "SPECDEPLOY_POOL": "NVIDIA-H100-80GB-HBM3",
        "SPECDEPLOY_ALLOWED_K": "0,1,3",
        "SPECDEPLOY_RELOAD_SECONDS": "0.1",
        "SPECDEPLOY_EMULATED_GPU": "NVIDIA-H100-80GB-HBM3",
        "SPECDEPLOY_EMULATED_TIME_SCALE": TIME_SCALE,
        "SPECDEPLOY_EMULATED_LOAD_SECONDS": "0.2",
    }
    env.update(overrides)
    return env


def write_table(tmp: Path, schedule: Sequence[Sequence[int]], policy: str = "table") -> None:
    doc = {"policy": policy, "maxK": 5, "schedule": [list(r) for r in schedule]}
    path = tmp / "table.json"
    staged = tmp / "table.json.new"
    staged.write_text(json.dumps(doc))
    staged.replace(path)  # a new inode, as a ConfigMap's ..data swap gives


@contextlib.contextmanager
def running(
    tmp: Path,
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    port: int,
    metrics_port: int,
    wait_ready: bool = True,
) -> Iterator[Server]:
    """The server started and (unless told not to) serving; stopped (SIGTERM, then kill) after."""
    log = tmp / f"server-{port}.log"
    full_env = {**os.environ, **env}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "e2e.emulated.vllm_serve", *args],
            cwd=ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(proc, port, metrics_port, log)
    try:
        if wait_ready:
            wait_for(server, 200)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(server: Server, status: int, timeout: float = START_TIMEOUT_S) -> None:
    """Until ``/health`` answers ``status`` (fails with the server's log if it exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(f"server exited {server.proc.returncode}:\n{server.output()}")
        with contextlib.suppress(OSError):
            if server.request("GET", "/health", timeout=2).status == status:
                return
        time.sleep(0.02)
    raise AssertionError(f"/health never answered {status}:\n{server.output()}")
