"""What a SpeculativeDeployment's pods run, as tests and benchmarks of the loop read it.

Read through the API (the operator's children, by its managed-by label) and
from each serving pod's own add-on endpoint (``specdeploy_table_generation``:
how many tables that pod has installed; ``specdeploy_steps_total``: the K its
steps ran), so "every pod runs the new table", "the pods chose K=0" and "no
pod restarted" are observed rather than inferred.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from e2e.localcluster.emulation import LOCAL_METRICS, LOCAL_PID
from e2e.localcluster.kubeapi import KubeApi
from specdeploy.operator.naming import table_configmap_name
from specdeploy.runtime.contract import Series, SeriesLabel
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
MANAGED = "app.kubernetes.io/managed-by=specdeploy"
SERVING = "serving"


def children(api: KubeApi, kind: str, namespace: str) -> list[Obj]:
    return api.items(paths.path(kind, namespace), labelSelector=MANAGED)


def serving_pods(api: KubeApi, namespace: str) -> dict[str, str]:
    """Running serving pod uid -> the pid of its process (a restart changes either)."""
    return {
        p["metadata"]["uid"]: p["metadata"].get("annotations", {}).get(LOCAL_PID, "")
        for p in children(api, "Pod", namespace)
        if p["metadata"].get("labels", {}).get("specdeploy.io/component") == SERVING
        and p["status"].get("phase") == "Running"
    }


def templates(api: KubeApi, namespace: str) -> dict[str, str]:
    """Deployment name -> a digest of its pod template."""
    return {
        d["metadata"]["name"]: hashlib.sha256(
            json.dumps(d["spec"]["template"], sort_keys=True).encode()
        ).hexdigest()[:16]
        for d in children(api, "Deployment", namespace)
    }


def tables(api: KubeApi, namespace: str) -> dict[str, list[list[int]]]:
    """Table ConfigMap name -> the schedule it carries."""
    found = {}
    for cm in children(api, "ConfigMap", namespace):
        if "table.json" in cm.get("data", {}):
            found[cm["metadata"]["name"]] = json.loads(cm["data"]["table.json"])["schedule"]
    return found


def mean_k(schedule: list[list[int]], top: int = 64) -> float:
    """A schedule's mean K over batch sizes 1..top (the tail inherits the last range)."""
    ks = [
        next((r[2] for r in schedule if r[0] <= bs <= r[1]), schedule[-1][2])
        for bs in range(1, top + 1)
    ]
    return sum(ks) / len(ks)


def _addon_metrics(api: KubeApi, namespace: str) -> dict[str, str]:
    """Serving pod name -> its add-on's ``/metrics`` text (pods without an endpoint left out)."""
    found = {}
    for pod in children(api, "Pod", namespace):
        address = pod["metadata"].get("annotations", {}).get(LOCAL_METRICS)
        if not address:
            continue
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
            found[pod["metadata"]["name"]] = response.read().decode()
    return found


def _samples(text: str, family: str) -> list[Sample]:
    """``family``'s samples in a ``/metrics`` text (``_created`` left out)."""
    return [
        sample
        for found in text_string_to_metric_families(text)
        if found.name == family
        for sample in found.samples
        if not sample.name.endswith("_created")
    ]


def addon_generations(api: KubeApi, namespace: str) -> dict[str, float]:
    """Serving pod name -> its add-on's ``specdeploy_table_generation``."""
    found = {}
    for name, text in _addon_metrics(api, namespace).items():
        for sample in _samples(text, Series.TABLE_GENERATION):
            found[name] = sample.value
    return found


def addon_steps_by_k(api: KubeApi, namespace: str) -> dict[str, dict[int, float]]:
    """GPU type (the add-on's ``pool`` label) -> K -> decode steps its pods ran at that K
    (``specdeploy_steps_total``, summed over the pool's pods): the K the pods chose, which
    the adaptive policy may hold below the table's."""
    found: dict[str, dict[int, float]] = {}
    for text in _addon_metrics(api, namespace).values():
        for sample in _samples(text, Series.STEPS):
            by_k = found.setdefault(sample.labels[SeriesLabel.POOL], {})
            k = int(sample.labels[SeriesLabel.K])
            by_k[k] = by_k.get(k, 0.0) + sample.value
    return found


LOWERED = "table lowered by the operator"
PODS_CHOSE_K0 = "pods chose K=0"
K0_SHARE = 0.75
"""Share of a pool's steps since the shift at K=0 that counts as its pods' own answer."""
MIN_STEPS = 300.0
"""Steps since the shift that share is read over."""


def shift_answers(
    api: KubeApi,
    namespace: str,
    parent: str,
    before: dict[str, list[list[int]]],
    steps_before: dict[str, dict[int, float]],
    gpu_types: Sequence[str],
) -> dict[str, str]:
    """GPU type -> how its pool has answered a traffic shift to random text so far.

    Two answers are right. The operator lowers the pool's table from the live
    acceptance (``LOWERED``), or the pool's pods move to K=0 on their own
    (``PODS_CHOSE_K0``): the adaptive policy prices K=0 above the table's K
    under random text (an H100 pod at batch 1-2 does within seconds), and then
    its speculative steps are too few for a confident live acceptance in one
    window, so the table rightly stays. A pool with neither is absent.
    ``before`` and ``steps_before`` are ``tables`` and ``addon_steps_by_k`` at
    the shift.
    """
    now, steps_now = tables(api, namespace), addon_steps_by_k(api, namespace)
    found = {}
    for gpu in gpu_types:
        table = table_configmap_name(parent, gpu)
        if mean_k(now[table]) < mean_k(before[table]):
            found[gpu] = LOWERED
            continue
        earlier = steps_before.get(gpu, {})
        ran = {k: n - earlier.get(k, 0.0) for k, n in steps_now.get(gpu, {}).items()}
        total = sum(ran.values())
        if total >= MIN_STEPS and ran.get(0, 0.0) / total >= K0_SHARE:
            found[gpu] = PODS_CHOSE_K0
    return found


def start_load(
    url: str, model: str, workload: str, seconds: int, out: Path, *, concurrency: int = 8
) -> subprocess.Popen[bytes]:
    """``specdeploy load`` against ``url`` in the background, its JSON report to ``out``."""
    argv = [sys.executable, "-m", "specdeploy", "load", f"--url={url}", f"--model={model}"]
    argv += [f"--concurrency={concurrency}", f"--duration={seconds}", f"--workload={workload}"]
    argv += [f"--json={out}", "--max-tokens=64"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def load_summary(proc: subprocess.Popen[bytes], out: Path, timeout: float = 180) -> Obj:
    """Wait for a ``start_load`` run; its summary (asserting it exited 0)."""
    code = proc.wait(timeout=timeout)
    if code != 0:
        raise AssertionError(f"specdeploy load exited {code}")
    summary: Obj = json.loads(out.read_text())["summary"]
    return summary
