"""Autoscaling under a load ramp on the local cluster: load, replicas and K over time.

On a cluster of its own (real control plane, operator, Prometheus 3, the real
HPA controller and prometheus-adapter for mode ``hpa``; GPUs emulated by the
kubelet stand-in: simulator step times, the real add-on in each emulated vLLM
pod) it runs the e2e's ramp (``e2e.autoscale.ramp``: heavy chat load, then
light) once per mode and records:

* the reaction times: from the load's start to the first added replica, and
  from the light stage's start to the pool back at one replica (the down
  window is 15 s; the telemetry interval 6 s);
* every request's outcome (``specdeploy load``: ok, refused, failed, timed out);
* a PNG per mode: concurrency and tokens/s, outcomes, the pool Deployment's
  replicas and the capacity model's wanted count, and K per pod from Prometheus.

The timings and counts are MEASURED on this machine against emulated pods; the
pods' speed (and so the capacity and demand in tokens/s) is MODELLED. Usage::

    .venv/bin/python bench/autoscale_ramp.py [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: e2e.* from the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.autoscale.join import matrix_series, read_load
from e2e.autoscale.ramp import DOWN_WINDOW_S, HEAVY_S, NAME, RAMP, Ramp, run_ramp
from e2e.autoscale.timeline import plot_ramp
from e2e.dashboards import prom
from e2e.localcluster import cluster
from e2e.localcluster.binaries import repo_root
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths

MODES = ("operator", "hpa")
Obj = dict[str, Any]


def reactions(ramp: Ramp) -> Obj:
    changes = ramp.changes()
    grew = next((t for t, n in changes if n > 1), None)
    light = ramp.load_started + HEAVY_S
    shrunk = next((t for t, n in changes if n == 1 and t > light), None)
    return {
        "grew_after_load_s": None if grew is None else round(grew - ramp.load_started, 1),
        "back_to_one_after_light_s": None if shrunk is None else round(shrunk - light, 1),
        "peak_replicas": max((n for _, n in changes), default=1),
        "replica_changes": [(round(t - ramp.load_started, 1), n) for t, n in changes],
    }


def series(ramp: Ramp, prometheus_url: str, namespace: str) -> dict[str, list[tuple[float, float]]]:
    """Replicas and wanted from the samples; K per pod from Prometheus, on the load's axis."""
    load = read_load(ramp.load_json)
    out: dict[str, list[tuple[float, float]]] = {}
    for key, name in (("replicas", "replicas: Deployment"), ("wanted", "replicas: wanted")):
        out[name] = [
            (float(r["unix"]) - load.started_at_unix, float(r[key]))
            for r in ramp.rows
            if r.get(key) is not None
        ]
    expr = f'max by (pod) (specdeploy_k{{namespace="{namespace}", specdeploy_deployment="{NAME}"}})'
    matrix = prom.query_range(prometheus_url, expr, load.started_at_unix, load.end_unix, 2.0)
    out.update(matrix_series("K", matrix, label="pod", started_at_unix=load.started_at_unix))
    return out


def run_mode(running: cluster.Cluster, api: KubeApi, mode: str, out: Path, png: Path) -> Obj:
    namespace = f"autoscale-{mode}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(
        lambda: api.get_or_none(paths.path("ServiceAccount", namespace, "default")),
        what="the namespace's default ServiceAccount",
        timeout=60,
    )
    started = time.monotonic()
    ramp = run_ramp(running, api, namespace, mode, out)
    drawn = series(ramp, running.prometheus_url, namespace)
    rows = read_load(ramp.load_json).rows
    plot_ramp(rows, drawn, png, title=f"autoscaling mode {mode}: load ramp {RAMP} (emulated H100)")
    return {
        "mode": mode,
        "tpot_target_ms": ramp.tpot_target_ms,
        # one replica's capacity at the sized target while the load ran (modelled pods)
        "capacity_tokens_per_s": sorted(
            {r["capacity"] for r in ramp.rows if r["t"] >= ramp.load_started and r.get("capacity")}
        ),
        "peak_demand_tokens_per_s": max(
            (r.get("demand") or 0 for r in ramp.rows if r["t"] >= ramp.load_started), default=0
        ),
        "requests": ramp.requests,
        "wall_s": round(time.monotonic() - started, 1),
        "png": str(png.relative_to(repo_root())) if png.is_relative_to(repo_root()) else str(png),
        **reactions(ramp),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=repo_root() / "bench" / "results")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="autoscale-bench-"))
    scratch = workdir / "runs"
    scratch.mkdir()
    running = cluster.up(
        workdir, fleet_spec="h100=1", crds=repo_root() / "crds", operator=True, log=print
    )
    try:
        results = [
            run_mode(running, running.api(), m, scratch, args.out / f"autoscale_ramp-{m}.png")
            for m in MODES
        ]
    finally:
        cluster.down(workdir, log=lambda _m: None)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    doc = {
        "kind": "specdeploy-autoscale-ramp",
        "command": "make bench-autoscale",
        "commit": commit,
        "ramp": RAMP,
        "down_window_s": DOWN_WINDOW_S,
        "note": "times and request outcomes measured on the local cluster; the pods' speed "
        "(capacity, demand in tokens/s) is modelled by the emulated H100",
        "modes": results,
    }
    target = args.out / "autoscale_ramp.json"
    target.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
