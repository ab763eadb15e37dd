"""One pool on the real vLLM engine: the loop with a real engine, add-on and metrics in it.

The cluster's switch (``real_vllm.configure``, never the spec) makes the
A100 pool's serving pod run vLLM's OpenAI server from the vLLM CPU venv on
SmolLM2-135M with n-gram drafts and the specdeploy add-on, while the H100
pool stays emulated. Real here beyond ``test_loop``'s list: the engine, its
``vllm:*`` metrics and the add-on inside vLLM's engine core. Not real: the
model is SmolLM2, not the spec's, and the table is the one the operator
derived for the emulated GPU type (modelled).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.localcluster import cluster, real_vllm, service_url
from e2e.localcluster.emulation import LOCAL_HTTP
from e2e.localcluster.fleet_view import children, load_summary, start_load
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.prometheus import instant_query
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
NAME = "real"
REAL_GPU, EMULATED_GPU = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        real_vllm.configure(local_cluster.layout.root, REAL_GPU)
        try:
            yield local_cluster
        finally:
            real_vllm.configure(local_cluster.layout.root, None)


def spec() -> Obj:
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "model": {"name": "HuggingFaceTB/SmolLM2-135M-Instruct", "servedModelName": "smol"},
            "speculation": {"method": "ngram", "maxK": 3},
            "pools": [{"gpuType": REAL_GPU}, {"gpuType": EMULATED_GPU}],
            "telemetry": {"interval": "10s"},
        },
    }


def test_a_pool_on_the_real_engine_serves_and_is_scraped(
    operator: cluster.Cluster, admin: KubeApi, namespace: str, tmp_path: Path
) -> None:
    admin.post(paths.path("SpeculativeDeployment", namespace), spec())
    wait_for(
        lambda: (
            (
                admin.get(paths.path("SpeculativeDeployment", namespace, NAME)).get("status") or {}
            ).get("phase")
            == "Ready"
        ),
        what="Ready",
        timeout=240,
    )

    def real_pod() -> Obj | None:
        for p in children(admin, "Pod", namespace):
            labels, meta = p["metadata"]["labels"], p["metadata"]
            if (
                labels.get("specdeploy.io/component") == "serving"
                and p["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == REAL_GPU
                and LOCAL_HTTP in (meta.get("annotations") or {})
            ):
                return p
        return None

    real = wait_for(real_pod, what="the real pool's pod, started by the stand-in", timeout=120)
    address = real["metadata"]["annotations"][LOCAL_HTTP]

    def engine_up() -> bool:
        try:
            with urllib.request.urlopen(f"http://{address}/health", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    started = time.monotonic()
    wait_for(engine_up, what="the real vLLM server's /health", timeout=600)
    print(f"\nreal vLLM pod healthy after {time.monotonic() - started:.0f} s")
    with urllib.request.urlopen(f"http://{address}/v1/models", timeout=10) as response:
        served = json.loads(response.read())["data"][0]
    assert served["id"] == "smol" and "smollm2" in served["root"].lower()  # the real model

    url = service_url.find(operator.layout.root, namespace, NAME, wait=60)
    out = tmp_path / "load.json"
    summary = load_summary(start_load(url, "smol", "chat", 30, out, concurrency=4), out)
    assert 0 < summary["requests"]["ok"] == summary["requests"]["sent"]  # none refused either

    pool = {
        "specdeploy_deployment": NAME,
        "specdeploy_pool": real["metadata"]["labels"]["specdeploy.io/pool"],
    }
    selector = ",".join(f'{k}="{v}"' for k, v in pool.items())

    def scraped() -> bool:
        tokens = instant_query(
            operator.prometheus_url, f"vllm:generation_tokens_total{{{selector}}}"
        )
        steps = instant_query(operator.prometheus_url, f"specdeploy_steps_total{{{selector}}}")
        return bool(tokens) and float(tokens[0]["value"][1]) > 0 and bool(steps)

    wait_for(scraped, what="the real engine's and add-on's series in Prometheus", timeout=60)
