"""``python -m e2e.demo [--keep] [--workdir DIR] [--out DIR]``: the demo (see the package doc).

Exit 0 once the dashboards' PNGs are written; 1 when a step failed (the message
names it). With ``--keep`` (``make demo KEEP=1``) the cluster stays up and the
``export`` lines to use it are printed last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from e2e.dashboards.prom import QueryError
from e2e.dashboards.render import render_dashboards
from e2e.demo import builds, observe, phases, table
from e2e.demo.helm import Helm, HelmFailed, chart_dir
from e2e.localcluster import binaries, cluster, service_url
from e2e.localcluster.fleet_view import load_summary, start_load
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.processes import ComponentFailed
from e2e.localcluster.waiting import WaitTimeout
from specdeploy.runtime.kube import paths

FLEET = "h100=1,l40s=1"
"""Two GPU types: the example (no pools listed) gets one pool per type discovered."""
NAMESPACE = "demo"
EXAMPLE = "examples/specdeploy.yaml"
INTERVAL_S = 10
"""The shortest telemetry interval the operator takes (``telemetry.interval.MIN_SECONDS``)."""
PROMETHEUS_VALUE = "operator.prometheusURL"
"""The chart value that points the operator at Prometheus (the cluster's, here)."""
RESTART_VALUE = "operator.floor.restartSeconds"
RESTART_S = 2.0
"""What a serving pod's restart costs here: an emulated vLLM pod is Ready about a second
after it starts (a real 8B model takes minutes: the chart's default is 120 s). The live
floor waits for a losing streak of this over the loss before a restart pays."""
CHUNK_S = 15
"""A phase that waits for a floor state runs its load in chunks of this, looking between."""
STATUS_EVERY_S = 4.0
REFRESH_S = 15.0
READY_TIMEOUT_S = 300.0
Log = Callable[[str], None]


class DemoFailed(RuntimeError):
    """A step of the demo failed; the message says which and where to look."""


def log(message: str) -> None:
    print(message, flush=True)


class Clock:
    """Seconds since the start, and the time each named step took."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last = self.started
        self.steps: dict[str, float] = {}

    def now(self) -> float:
        return time.monotonic() - self.started

    def step(self, name: str) -> None:
        here = time.monotonic()
        self.steps[name] = round(here - self.last, 1)
        self.last = here
        log(f"[{self.now():5.0f} s] {name}: {self.steps[name]} s")


class StatusPrinter:
    """Prints the status table at once when a pool's phase, state, replicas, K or table
    changed, and otherwise every ``REFRESH_S`` while the live numbers move."""

    def __init__(self, api: KubeApi, prometheus_url: str, clock: Clock) -> None:
        self.api, self.prometheus_url, self.clock = api, prometheus_url, clock
        self.shape: tuple[tuple[str, ...], ...] | None = None
        self.text = ""
        self.printed_at = float("-inf")

    def __call__(self) -> None:
        rows = observe.status_rows(self.api, NAMESPACE, self.prometheus_url)
        text, shape = table.render(rows), table.shape(rows)
        stale = self.clock.now() - self.printed_at >= REFRESH_S and text != self.text
        if shape != self.shape or stale:
            log(f"\n[{self.clock.now():5.0f} s] kubectl get sdep -n {NAMESPACE} (+ Prometheus)")
            log(text)
            self.shape, self.text, self.printed_at = shape, text, self.clock.now()

    def force(self) -> None:
        """Print the table now (a phase's end), whatever changed."""
        self.shape = None
        self()


def sdep_phase(api: KubeApi, name: str) -> str:
    body = api.get(paths.path("SpeculativeDeployment", NAMESPACE, name))
    return str((body.get("status") or {}).get("phase", "Pending"))


def watch(printer: StatusPrinter, seconds: float, done: Callable[[], bool] = lambda: False) -> bool:
    """Print the table as it changes for up to ``seconds``; whether ``done`` became true."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        printer()
        if done():
            return True
        time.sleep(STATUS_EVERY_S)
    return done()


def install_chart(running: cluster.Cluster, clock: Clock) -> None:
    helm = Helm(running.kubeconfig, running.layout.root / "helm")
    values: dict[str, str | float] = {
        PROMETHEUS_VALUE: running.prometheus_url,
        RESTART_VALUE: RESTART_S,
    }
    log(f"helm install specdeploy {chart_dir()} (values: {values})")
    helm.install(chart_dir(), values)
    clock.step("helm install (CRDs, hook, operator pod Ready)")


def apply_example(api: KubeApi) -> str:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    body = observe.example(binaries.repo_root() / EXAMPLE, interval=f"{INTERVAL_S}s")
    api.post(paths.path("SpeculativeDeployment", NAMESPACE), body)
    name = str(body["metadata"]["name"])
    log(f"applied {EXAMPLE} as {NAMESPACE}/{name} (telemetry interval {INTERVAL_S} s for the demo)")
    return name


def drive_load(
    running: cluster.Cluster, api: KubeApi, name: str, printer: StatusPrinter, out: Path
) -> list[dict[str, object]]:
    """Every phase's load through the Service; what the live floor showed in each."""
    url = service_url.find(running.layout.root, NAMESPACE, name, wait=60)
    report = []
    for number, phase in enumerate(phases.PHASES, 1):
        log(f"\nload {number}: {phase.describe()}, 8 streams, against {url}")
        report.append(run_phase(api, name, printer, phase, url, out / f"load-{number}"))
    return report


def run_phase(
    api: KubeApi, name: str, printer: StatusPrinter, phase: phases.Phase, url: str, out: Path
) -> dict[str, object]:
    """One phase's load (in chunks when it waits for a floor state); its verdicts."""
    started, wall = time.monotonic(), datetime.datetime.now(datetime.UTC)
    first_seen: dict[str, float] = {}
    sent = ok = chunks = 0
    while True:
        elapsed = time.monotonic() - started
        chunk = max(int(phase.seconds - elapsed) if phase.until is None else CHUNK_S, 1)
        chunks += 1
        path = out.with_name(f"{out.name}-{phase.workload}-{chunks}.json")
        proc = start_load(url, "llama-8b", phase.workload, chunk, path)
        seen = watch(printer, chunk, lambda: _settled(api, name, phase, started, first_seen))
        requests = load_summary(proc, path, timeout=chunk + 90).get("requests", {})
        sent, ok = sent + int(requests.get("sent", 0)), ok + int(requests.get("ok", 0))
        elapsed = time.monotonic() - started
        if (
            phase.until is None
            or elapsed >= phase.cap_seconds
            or (seen and elapsed >= phase.seconds)
        ):
            break
    printer.force()
    log(f"load {phase.workload}, {elapsed:.0f} s: {ok} of {sent} requests ok")
    pools = phases.pools_now(api.get(paths.path("SpeculativeDeployment", NAMESPACE, name)))
    found = phases.verdicts(pools, phase, wall, first_seen, INTERVAL_S)
    for verdict in found if phase.until else ():
        log(f"  live floor: {verdict.line()}")
    return {
        **phases.as_json(phase, found),
        "seconds": round(elapsed),
        "requests": {"sent": sent, "ok": ok},
    }


def _settled(
    api: KubeApi, name: str, phase: phases.Phase, started: float, first_seen: dict[str, float]
) -> bool:
    """Whether every pool runs the phase's floor state, rolled out; notes when each did."""
    if phase.until is None:
        return False
    pools = phases.pools_now(api.get(paths.path("SpeculativeDeployment", NAMESPACE, name)))
    for pool in pools:
        if pool.state == phase.until and pool.settled:
            first_seen.setdefault(pool.gpu, round(time.monotonic() - started, 1))
    return phases.reached(pools, phase.until)


def run(workdir: Path, out: Path, *, keep: bool) -> int:
    clock = Clock()
    builds.ensure_built(log)
    clock.step("binaries")
    running = cluster.up(workdir, fleet_spec=FLEET, crds=None, operator=False, log=log)
    clock.step(f"local cluster up (fleet {FLEET}, no operator: the chart brings it)")
    try:
        install_chart(running, clock)
        api = running.api()
        name = apply_example(api)
        printer = StatusPrinter(api, running.prometheus_url, clock)
        if not watch(printer, READY_TIMEOUT_S, lambda: sdep_phase(api, name) == "Ready"):
            raise DemoFailed(f"{NAMESPACE}/{name} not Ready in {READY_TIMEOUT_S:.0f} s")
        clock.step("example profiled and Ready")
        load_started = clock.now()
        out.mkdir(parents=True, exist_ok=True)
        floor = drive_load(running, api, name, printer, out)
        (out / "demo-floor.json").write_text(json.dumps(floor, indent=1) + "\n")
        clock.step("traffic: chat, random text, chat (the live floor's round trip)")
        window = int(clock.now() - load_started) + 30
        pngs = render_dashboards(running.prometheus_url, out / "dashboards", window_s=window)
        clock.step(f"{len(pngs)} dashboard(s) drawn, every panel from the live Prometheus")
        log("\nPNGs:")
        for png in pngs:
            log(f"  {png}")
        (out / "demo-timings.json").write_text(json.dumps(clock.steps, indent=1) + "\n")
        log(f"\ndemo: {clock.now():.0f} s in all; timings in {out / 'demo-timings.json'}")
    finally:
        if keep:
            from e2e.dev import export_lines

            log("\nKEEP=1: the cluster stays up; to use it (and `specdeploy dev down` after):")
            for line in export_lines(running):
                log(line)
        else:
            cluster.down(workdir, log=lambda _m: None)
            log(f"demo: cluster in {workdir} torn down")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--workdir", type=Path, default=binaries.cache_root() / "demo")
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="PNGs and reports")
    args = parser.parse_args(argv)
    try:
        return run(args.workdir, args.out.resolve(), keep=args.keep)
    except (DemoFailed, HelmFailed, ComponentFailed, ApiError, WaitTimeout, QueryError) as err:
        print(f"demo: {err}", file=sys.stderr, flush=True)
        return 1
    except binaries.BinariesMissing as err:
        print(f"demo: {err}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
