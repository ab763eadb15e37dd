"""The telemetry loop on the local cluster: writes per interval, and a traffic shift's latency.

On a cluster of its own (real control plane, operator, Prometheus; GPUs
emulated by the kubelet stand-in: simulator step times, the real add-on in
each emulated vLLM pod) it serves a plain two-pool SpeculativeDeployment and
records, from the API server's audit log:

* the operator's API writes per telemetry interval per pool, by kind, in
  four phases: no traffic; steady ``chat`` traffic; the intervals after the
  traffic shifts to ``random`` (acceptance collapses); steady ``random``;
* the time from the shift to every serving pod running a lower-K table (the
  table ConfigMaps carry lower K and each pod's add-on has installed a new
  table: ``specdeploy_table_generation`` went up);
* pod restarts (uid or process changed) and pod-template changes.

The writes and times are MEASURED on this machine; the serving figures
behind them are MODELLED (no GPU: the simulator's step costs). Usage::

    .venv/bin/python bench/loop_shift.py [--interval 10] [--intervals 5] \\
        [--out bench/results/loop_shift.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: e2e.* from the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.localcluster import audit, cluster, service_url
from e2e.localcluster.binaries import repo_root
from e2e.localcluster.fleet_view import (
    LOWERED,
    addon_generations,
    addon_steps_by_k,
    load_summary,
    mean_k,
    serving_pods,
    shift_answers,
    start_load,
    tables,
    templates,
)
from e2e.localcluster.identity import USER
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.operator.naming import deployment_name
from specdeploy.runtime.kube import paths

NAME, NAMESPACE, MODEL = "chat", "loop-bench", "llama"
POOLS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S")
Obj = dict[str, Any]


def spec(interval: int) -> Obj:
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": MODEL},
            "speculation": {
                "method": "eagle3",
                "draftModel": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "maxK": 5,
            },
            "pools": [{"gpuType": gpu} for gpu in POOLS],
            "telemetry": {"interval": f"{interval}s"},
        },
    }


def operator_writes(log: Path, start: datetime, end: datetime) -> list[audit.Write]:
    """The operator's writes in [start, end): its client's, as the ServiceAccount the harness
    runs it as (a filter on the client alone would count the profiler's Jobs too)."""
    return [w for w in audit.read_writes(log) if start <= w.at < end and audit.is_operator(w, USER)]


def phase(log: Path, label: str, start: datetime, end: datetime, interval: int) -> Obj:
    writes = operator_writes(log, start, end)
    intervals = (end - start).total_seconds() / interval
    per_kind = Counter(w.what for w in writes)
    return {
        "phase": label,
        "seconds": round((end - start).total_seconds(), 1),
        "intervals": round(intervals, 2),
        "writes": len(writes),
        "writesPerIntervalPerPool": round(len(writes) / intervals / len(POOLS), 3),
        "byKind": dict(sorted(per_kind.items())),
    }


def now() -> datetime:
    return datetime.now(UTC)


def run(interval: int, intervals: int, workdir: Path) -> Obj:
    log_lines: list[str] = []
    running = cluster.up(
        workdir,
        fleet_spec="h100=1,l40s=1",
        crds=repo_root() / "crds",
        operator=True,
        log=log_lines.append,
    )
    try:
        return _scenario(running, running.api(), interval, intervals)
    finally:
        cluster.down(workdir, log=lambda _m: None)


def _scenario(running: cluster.Cluster, api: KubeApi, interval: int, intervals: int) -> Obj:
    audit_log = running.layout.audit_log
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    wait_for(
        lambda: api.get_or_none(paths.path("ServiceAccount", NAMESPACE, "default")),
        what="the namespace's default ServiceAccount",
        timeout=60,
    )
    created = time.monotonic()
    api.post(paths.path("SpeculativeDeployment", NAMESPACE), spec(interval))
    wait_for(
        lambda: (
            (api.get(paths.path("SpeculativeDeployment", NAMESPACE, NAME)).get("status") or {}).get(
                "phase"
            )
            == "Ready"
        ),
        what="Ready",
        timeout=300,
    )
    ready_s = round(time.monotonic() - created, 1)
    url = service_url.find(running.layout.root, NAMESPACE, NAME, wait=60)
    phases, out = [], Path(tempfile.mkdtemp(prefix="loop-bench-"))
    time.sleep(2 * interval)  # the roll-out's own writes settle
    start = now()
    time.sleep(intervals * interval)
    phases.append(phase(audit_log, "no traffic", start, now(), interval))

    chat = start_load(url, MODEL, "chat", (intervals + 3) * interval, out / "chat.json")
    time.sleep(3 * interval)  # warm-up: the first live view is written here
    start = now()
    time.sleep(intervals * interval)
    phases.append(phase(audit_log, "steady chat", start, now(), interval))
    chat_summary = load_summary(chat, out / "chat.json")

    pods, template = serving_pods(api, NAMESPACE), templates(api, NAMESPACE)
    before, generations = tables(api, NAMESPACE), addon_generations(api, NAMESPACE)
    steps_before = addon_steps_by_k(api, NAMESPACE)
    shift_at, shifted = now(), time.monotonic()
    rand = start_load(url, MODEL, "random", (2 * intervals + 6) * interval, out / "random.json")
    answers: dict[str, str] = {}

    def answered_and_in_force() -> bool:
        # Each pool: its lowered table in force in every pod, or its pods at K=0 by their
        # own choice (fleet_view.shift_answers: then the table rightly stays).
        answers.update(shift_answers(api, NAMESPACE, NAME, before, steps_before, POOLS))
        if len(answers) < len(POOLS):
            return False
        lowered = tuple(f"{deployment_name(NAME, g)}-" for g, a in answers.items() if a == LOWERED)
        installed = addon_generations(api, NAMESPACE)
        return all(installed[p] > generations[p] for p in generations if p.startswith(lowered))

    wait_for(answered_and_in_force, what="every pool's answer in force", timeout=30 * interval)
    shift_s = round(time.monotonic() - shifted, 1)
    time.sleep(max(0.0, 3 * interval - shift_s))
    phases.append(phase(audit_log, "shift to random (3 intervals)", shift_at, now(), interval))
    start = now()
    time.sleep(intervals * interval)
    phases.append(phase(audit_log, "steady random", start, now(), interval))
    random_summary = load_summary(rand, out / "random.json", timeout=60 * interval)
    after = tables(api, NAMESPACE)
    pods_after, templates_after = serving_pods(api, NAMESPACE), templates(api, NAMESPACE)
    return {
        "kind": "specdeploy-loop-shift",
        "measured": "API writes (audit log), times, restarts on this machine",
        "modelled": "serving step times and acceptance (simulator; no GPU)",
        "interval_s": interval,
        "pools": list(POOLS),
        "readySeconds": ready_s,
        "shiftToTablesInForceSeconds": shift_s,
        "shiftToTablesInForceIntervals": round(shift_s / interval, 2),
        "podRestarts": sum(1 for uid, pid in pods.items() if pods_after.get(uid) != pid),
        "podTemplateChanged": sorted(
            name for name, digest in templates_after.items() if template.get(name, digest) != digest
        ),
        "deploymentsAdded": sorted(set(templates_after) - set(template)),
        "answers": answers,
        "meanKBefore": {n: round(mean_k(t), 2) for n, t in before.items()},
        "meanKAfter": {n: round(mean_k(t), 2) for n, t in after.items()},
        "phases": phases,
        "load": {"chat": chat_summary, "random": random_summary},
    }


def markdown(result: Obj) -> str:
    lines = [
        "# The telemetry loop on the local cluster (`bench/loop_shift.py`)",
        "",
        "MEASURED on this machine: the operator's API writes (the API server's audit log), "
        "the times and the restarts. MODELLED: what the pods serve (no GPU; the simulator's "
        "step costs, the real add-on choosing K in each emulated vLLM pod).",
        "",
        f"Interval {result['interval_s']} s, pools {', '.join(result['pools'])}; "
        f"the plain spec was Ready in {result['readySeconds']} s.",
        "",
        f"- traffic shift (chat -> random) to every pool's answer in force (a lower-K "
        f"table in every pod, or the pods at K=0 by their own choice): "
        f"**{result['shiftToTablesInForceSeconds']} s** "
        f"({result['shiftToTablesInForceIntervals']} intervals); "
        + ", ".join(f"{g}: {a}" for g, a in result.get("answers", {}).items()),
        f"- pod restarts: **{result['podRestarts']}**; pod templates changed: "
        f"**{', '.join(result['podTemplateChanged']) or 'none'}**; Deployments added "
        f"(the live floor's canary or plain reference): "
        f"**{', '.join(result['deploymentsAdded']) or 'none'}**",
        "- mean K over batch sizes 1-64, before -> after: "
        + ", ".join(
            f"{n}: {result['meanKBefore'][n]} -> {result['meanKAfter'][n]}"
            for n in result["meanKBefore"]
        ),
        "",
        "| phase | intervals | operator writes | per interval per pool | by kind |",
        "|---|---|---|---|---|",
    ]
    for p in result["phases"]:
        kinds = ", ".join(f"{k} x{v}" for k, v in p["byKind"].items()) or "-"
        lines.append(
            f"| {p['phase']} | {p['intervals']} | {p['writes']} | "
            f"{p['writesPerIntervalPerPool']} | {kinds} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--interval", type=int, default=10, help="telemetry interval, s")
    parser.add_argument("--intervals", type=int, default=5, help="intervals per steady phase")
    parser.add_argument("--out", type=Path, default=repo_root() / "bench/results/loop_shift.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="loop-cluster-") as workdir:
        result = run(args.interval, args.intervals, Path(workdir))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
