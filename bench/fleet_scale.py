"""Fleet scale: time to Ready, API request rates and operator RSS/CPU against D deployments.

On a local control plane of its own (real etcd, kube-apiserver,
controller-manager, scheduler; KWOK nodes with GFD labels and
``nvidia.com/gpu`` capacity as ``fleet.py`` writes them) it registers N GPU
nodes of six types, waits until the scheduler can use them (Ready and rid of
the lifecycle controller's not-ready taints: ``nodes_schedulable_s``), then
creates the seeded mix of ``e2e.fleet_scale.mix`` in steps (D = 100, 250,
500 by default) and records per step: time until all D are phase Ready, the
time of ONE more deployment whose profile is already cached, the operator's
requests per minute by verb at steady state (from the
API server's audit log, the operator's ServiceAccount), writes per idle
reconcile (the operator's reconcile counter, in an idle window that holds
full resyncs: the operator runs with ``--resync-seconds``, 60 here, and the
window opens once it has written nothing but Lease renewals and Events for
``--settle-seconds``), profiling Jobs against one per
(namespace, fingerprint), PromQL queries per telemetry interval (its own
metrics), and the operator process' RSS and CPU from ``/proc/<pid>``.

MEASURED: every time, count and RSS (the control plane and the operator are
real). EMULATED, by the cluster and not by the specs: the GPU nodes (KWOK),
the serving pods (KWOK marks them Running and Ready; the stand-in runs
``--serving=kwok``, so no emulated vLLM process per pod and no pod metrics)
and the profiling pods (the stand-in runs the profiler on the simulator).
Partial results are written after every step. ``--operator-checkout DIR``
runs another checkout's operator (its own ``.venv``; the code it imports is
checked to lie in DIR and recorded with its commit), for a before/after pair
with this benchmark's code. Usage::

    nice .venv/bin/python bench/fleet_scale.py [--nodes 2000] [--deployments 100,250,500]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: e2e.* from the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.fleet_scale import measure, mix
from e2e.localcluster import audit, cluster, fleet, identity, processes
from e2e.localcluster.binaries import repo_root
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.standin import SERVING_BY_KWOK
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
Request = measure.Request
TICKS = os.sysconf("SC_CLK_TCK")


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} fleet: {message}", flush=True)


class Sampler(threading.Thread):
    """The operator's RSS and CPU every second (peak RSS from VmHWM)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.rows: list[tuple[float, float, float]] = []
        self.stopping = False

    def read(self) -> tuple[float, float, float]:
        proc = Path(f"/proc/{self.pid}")
        return (
            time.time(),
            measure.rss_mib((proc / "status").read_text()),
            measure.cpu_seconds((proc / "stat").read_text(), TICKS),
        )

    def run(self) -> None:
        while not self.stopping:
            try:
                self.rows.append(self.read())
            except OSError:
                return
            time.sleep(1.0)

    def peak_mib(self) -> float:
        return measure.rss_mib(Path(f"/proc/{self.pid}/status").read_text(), "VmHWM")


def operator_metrics(running: cluster.Cluster) -> str:
    url = f"http://127.0.0.1:{running.state.ports.operator_metrics}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def phases(api: KubeApi) -> dict[str, str]:
    return {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": (d.get("status") or {}).get(
            "phase", ""
        )
        for d in api.items(paths.path("SpeculativeDeployment"))
    }


def wait_ready(api: KubeApi, keys: set[str], timeout: float, what: str) -> float | None:
    started = last = time.monotonic()
    while time.monotonic() - started < timeout:
        seen = phases(api)
        ready = sum(1 for k in keys if seen.get(k) == "Ready")
        if ready == len(keys):
            return time.monotonic() - started
        if time.monotonic() - last >= 20:
            last = time.monotonic()
            say(f"{what}: {ready}/{len(keys)} Ready after {time.monotonic() - started:.0f}s")
        time.sleep(2.0)
    return None


def create(api: KubeApi, planned: mix.Planned) -> str:
    try:
        api.post(paths.path("SpeculativeDeployment", planned.namespace), planned.body)
    except ApiError as err:
        if err.status != 409:
            raise
    return f"{planned.namespace}/{planned.body['metadata']['name']}"


def audit_lines(running: cluster.Cluster) -> Iterator[str]:
    for f in audit.log_files(running.layout.audit_log):
        if f.is_file():
            with f.open() as lines:
                yield from lines


def operator_requests(running: cluster.Cluster, start: float, end: float) -> Counter[Request]:
    return measure.requests_in_window(audit_lines(running), identity.USER, start, end)


def settle(running: cluster.Cluster, quiet: float, timeout: float) -> float | None:
    """Wait until the operator wrote nothing but Lease renewals and Events for ``quiet``
    seconds: what follows is idle (resyncs and telemetry intervals that change nothing)."""
    started = time.time()
    while time.time() - started < timeout:
        now = time.time()
        if measure.writes(operator_requests(running, now - quiet, now), housekeeping=False) == 0:
            return round(now - started, 1)
        time.sleep(5.0)
    return None


def metric_delta(before: str, after: str, name: str) -> float:
    return measure.metric_sum(after, name) - measure.metric_sum(before, name)


def steady(running: cluster.Cluster, args: argparse.Namespace, sampler: Sampler) -> Obj:
    """The idle window: every deployment as far as it got, nothing created or changed; with
    the operator's resync at ``--resync-seconds``, it holds that many full resyncs."""
    before, t0 = operator_metrics(running), time.time()
    cpu0 = sampler.read()[2]
    time.sleep(args.steady_seconds)
    after, t1 = operator_metrics(running), time.time()
    cpu1 = sampler.read()[2]
    requests = operator_requests(running, t0, t1)
    verbs = measure.by_verb(requests)
    minutes = (t1 - t0) / 60
    reconciles = metric_delta(before, after, "specdeploy_operator_reconciles_total")
    queries = metric_delta(before, after, "specdeploy_operator_promql_queries_total")
    intervals = metric_delta(before, after, "specdeploy_operator_telemetry_intervals_total")
    writes = measure.writes(requests, housekeeping=False)
    reads = verbs["get"] + verbs["list"]
    return {
        "window_s": round(t1 - t0, 1),
        "resyncs_in_window": round((t1 - t0) / args.resync_seconds, 2),
        "requests_per_min_by_verb": {v: round(n / minutes, 1) for v, n in sorted(verbs.items())},
        "requests_by_verb_and_resource": {
            f"{verb} {resource}": n for (verb, resource), n in sorted(requests.items())
        },
        "writes": measure.writes(requests),
        "writes_excluding_lease_and_events": writes,
        "reconciles": reconciles,
        "writes_per_idle_reconcile": round(writes / reconciles, 3) if reconciles else None,
        "reads_per_idle_reconcile": round(reads / reconciles, 2) if reconciles else None,
        "promql_queries": queries,
        "telemetry_intervals": intervals,
        "promql_queries_per_telemetry_interval": round(queries / intervals, 2)
        if intervals
        else None,
        "operator_cpu_cores": round((cpu1 - cpu0) / (t1 - t0), 3),
        "operator_rss_mib": round(sampler.read()[1], 1),
    }


def step(
    running: cluster.Cluster,
    api: KubeApi,
    plan: list[mix.Planned],
    done: int,
    d: int,
    args: argparse.Namespace,
    sampler: Sampler,
) -> Obj:
    say(f"step D={d}: creating {d - done} deployment(s)")
    started = time.monotonic()
    keys = {create(api, p) for p in plan[:d]}
    took = wait_ready(api, keys, args.ready_timeout, f"D={d}")
    row: Obj = {"deployments": d, "all_ready_s": None if took is None else round(took, 1)}
    seen = phases(api)
    row["not_ready_by_phase"] = dict(
        Counter(seen.get(k) or "none" for k in keys if seen.get(k) != "Ready")
    )
    row["wall_since_step_start_s"] = round(time.monotonic() - started, 1)
    # Jobs may be gone once their profile is written: count the operator's creates instead
    row["profiling_jobs"] = sum(
        1
        for f in audit.log_files(running.layout.audit_log)
        for w in audit.read_writes(f)
        if w.user == identity.USER and w.verb == "create" and w.resource == "jobs" and w.code == 201
    )
    row["profiling_jobs_expected"] = mix.expected_jobs(plan[:d])
    row["settled_after_s"] = settle(running, args.settle_seconds, args.ready_timeout)
    row["steady"] = steady(running, args, sampler)
    # one more deployment of the shared fingerprint: its profile is cached
    extra = mix.plan(1, args.namespaces)[0]
    extra.body["metadata"]["name"] = f"cached-{d}"
    extra.body["spec"]["pools"] = [{"gpuType": fleet.CATALOG["h100"].product}]
    extra = mix.Planned(mix.SHARED_NAMESPACE, extra.body, "shared", extra.profiles)
    key = create(api, extra)
    one = wait_ready(api, {key}, args.ready_timeout, f"cached-{d}")
    row["one_cached_ready_s"] = None if one is None else round(one, 1)
    row["operator_peak_rss_mib"] = round(sampler.peak_mib(), 1)
    say(f"step D={d}: {json.dumps(row)}")
    return row


def git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=False, cwd=checkout
    ).stdout.strip()


def operator_code(checkout: Path, python: str) -> Obj:
    """Which code the operator process will import: asked of the same interpreter with the
    same ``-P`` (no working directory on the path: the venv's install decides), so an
    editable install that points at another checkout is caught instead of measured under
    this one's commit."""
    probe = subprocess.run(
        [python, "-P", "-c", "import specdeploy.operator.main as h; print(h.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = Path(probe.stdout.strip()).resolve()
    if not imported.is_relative_to(checkout.resolve()):
        raise SystemExit(f"fleet: the operator would import {imported}, outside {checkout}")
    return {
        "checkout": str(checkout),
        "python": python,
        "imports": str(imported),
        "commit": git(checkout, "rev-parse", "HEAD"),
        "uncommitted_changes": bool(git(checkout, "status", "--porcelain", "--", ".")),
    }


def plot(doc: Obj, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["steps"]
    ds = [r["deployments"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    axes[0].plot(ds, [r["all_ready_s"] or 0 for r in rows], "o-", label="all D Ready")
    axes[0].plot(ds, [r.get("one_cached_ready_s") or 0 for r in rows], "s-", label="one cached")
    axes[0].set(xlabel="deployments D", ylabel="seconds", title="time to Ready")
    axes[0].legend()
    verbs = sorted({v for r in rows for v in r["steady"]["requests_per_min_by_verb"]})
    for verb in verbs:
        axes[1].plot(
            ds,
            [r["steady"]["requests_per_min_by_verb"].get(verb, 0) for r in rows],
            "o-",
            label=verb,
        )
    axes[1].set(xlabel="deployments D", ylabel="requests/min", title="steady API requests")
    axes[1].legend()
    axes[2].plot(ds, [r["operator_peak_rss_mib"] for r in rows], "o-", label="peak")
    axes[2].plot(ds, [r["steady"]["operator_rss_mib"] for r in rows], "s-", label="steady")
    axes[2].set(xlabel="deployments D", ylabel="MiB", title="operator RSS")
    axes[2].legend()
    fig.suptitle(f"fleet scale, N={doc['nodes']} KWOK GPU nodes ({doc['label'] or 'unlabelled'})")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--deployments", default="100,250,500", help="the steps of D")
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument(
        "--steady-seconds", type=float, default=120.0, help="the idle window per step"
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=60.0,
        help="the operator's resync (its default is 300): the idle window holds full resyncs",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=75.0,
        help="quiet (no writes but Lease renewals and Events) before the idle window: longer "
        "than the longest telemetry interval (60 s), after which a pool without series turns "
        "SeriesPending into SeriesMissing",
    )
    parser.add_argument(
        "--operator-checkout",
        type=Path,
        default=repo_root(),
        help="run the operator of another checkout (its own .venv), e.g. a baseline commit",
    )
    parser.add_argument("--ready-timeout", type=float, default=1500.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=repo_root() / "bench" / "results")
    args = parser.parse_args(argv)
    # A stop (Ctrl-C, even when started in the background; a TERM) tears the cluster down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    steps = sorted(int(s) for s in args.deployments.split(","))
    name = f"fleet_scale-{args.label}" if args.label else "fleet_scale"
    args.out.mkdir(parents=True, exist_ok=True)
    checkout = args.operator_checkout.resolve()
    python = sys.executable
    if checkout != repo_root().resolve():
        python = str(checkout / ".venv" / "bin" / "python")
    code = operator_code(checkout, python)
    doc: Obj = {
        "kind": "specdeploy-fleet-scale",
        "label": args.label,
        "commit": git(repo_root(), "rev-parse", "HEAD"),
        "operator_code": code,
        "operator_resync_seconds": args.resync_seconds,
        "nodes": args.nodes,
        "fleet": mix.fleet_spec(args.nodes),
        "deployment_steps": steps,
        "namespaces": args.namespaces,
        "steady_seconds": args.steady_seconds,
        "telemetry": "on: the cluster's Prometheus (no pod targets: serving pods are KWOK's)",
        "note": "MEASURED on the local control plane; GPU nodes, serving and profiling pods "
        "EMULATED (KWOK Ready; profiler on the simulator)",
        "steps": [],
        "finished": False,
    }
    workdir = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    t0 = time.monotonic()
    running = cluster.up(
        workdir,
        fleet_spec="h100=1",
        crds=checkout / "crds",
        operator=False,
        serving=SERVING_BY_KWOK,
        log=say,
    )
    try:
        cluster.start_operator(
            running,
            log=say,
            # -P: the venv's install decides what is imported, not the working directory
            launcher=(python, "-P", "-m", "specdeploy"),
            extra_args=(f"--resync-seconds={args.resync_seconds}",),
        )
        api = running.api()
        manifests = fleet.fleet_manifests(fleet.parse_fleet(doc["fleet"]))
        for i, node in enumerate(manifests):
            try:
                api.create(node)
            except ApiError as err:
                if err.status != 409:
                    raise
            if i % 250 == 0:
                say(f"nodes: {i}/{len(manifests)} created")
        names = [n["metadata"]["name"] for n in manifests]
        cluster.wait_nodes_ready(api, names, timeout=600)
        doc["nodes_ready_s"] = round(time.monotonic() - t0, 1)
        say(f"{len(manifests)} nodes Ready")
        # Deployments go to a fleet the scheduler can use: a pod refused for the
        # not-ready taints waited up to the 5-minute unschedulable-queue flush.
        cluster.wait_nodes_schedulable(api, names)
        doc["nodes_schedulable_s"] = round(time.monotonic() - t0, 1)
        say(f"{len(manifests)} nodes schedulable (no lifecycle taint)")
        for ns in mix.namespaces(args.namespaces):
            try:
                api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            except ApiError as err:
                if err.status != 409:
                    raise
        pid = next(
            r.pid for r in processes.read_records(running.layout.run) if r.name == "operator"
        )
        sampler = Sampler(pid)
        sampler.start()
        plan = mix.plan(steps[-1], args.namespaces)
        done = 0
        for d in steps:
            doc["steps"].append(step(running, api, plan, done, d, args, sampler))
            done = d
            (args.out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
            plot(doc, args.out / f"{name}.png")
        doc["operator_requests_refused"] = len(
            audit.refused(audit.requests_of(running.layout.audit_log, identity.USER))
        )
        doc["finished"] = True
        doc["wall_s"] = round(time.monotonic() - t0, 1)
    finally:
        (args.out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        cluster.down(workdir, log=lambda _m: None)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
