"""``make chaos``: the full matrix on a local cluster of its own, recorded as JSON and Markdown.

    python -m e2e.chaos.runner --out bench/results [--only C1a-n3,C2-etcd] [--steady-seconds 120]

One cluster (fleet ``FLEET``) in a work directory of its own, the operator
behind the fault proxy under its own ServiceAccount; each scenario runs in
a namespace of its own and is judged by the oracle (I1-I7). The results
say, per scenario, pass or fail per invariant, convergence seconds and the
operator's writes (from the audit log); C16/C17 are listed as slots for the
leader-election work. The exit status is 1 when any scenario failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from e2e.chaos import lab as lab_mod
from e2e.chaos.invariants import Check
from e2e.chaos.scenarios import SLOTS, Outcome, Scenario, matrix, run
from e2e.localcluster import binaries, cluster
from e2e.localcluster.binaries import repo_root

FLEET = "h100=2,a100=2,l40s=2"
STEADY_S = 120.0
"""The steady-state window of review §5.2 (I5); the per-PR subset uses a shorter one."""


def select(scenarios: list[Scenario], only: str | None) -> list[Scenario]:
    if not only:
        return scenarios
    wanted = {s.strip() for s in only.split(",") if s.strip()}
    unknown = wanted - {s.id for s in scenarios}
    if unknown:
        raise SystemExit(f"--only: unknown scenario(s) {sorted(unknown)}")
    return [s for s in scenarios if s.id in wanted]


def to_json(outcomes: Sequence[Outcome], *, steady_s: float, wall_s: float) -> dict[str, object]:
    return {
        "what": "chaos matrix on the local control plane (real etcd, kube-apiserver, "
        "controller-manager, scheduler; KWOK nodes and emulated GPU pods)",
        "steady_window_s": steady_s,
        "convergence_bound_s": 60,
        "wall_s": round(wall_s, 1),
        "passed": sum(o.passed for o in outcomes),
        "failed": sum(not o.passed for o in outcomes),
        "scenarios": [asdict(o) for o in outcomes],
        "not_run_here": SLOTS,
    }


INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6", "I7")


def to_markdown(outcomes: Sequence[Outcome], *, steady_s: float, wall_s: float) -> str:
    lines = [
        "# Chaos matrix (issue 15, review §5.3)",
        "",
        "Recorded by `make chaos` (`python -m e2e.chaos.runner`): real etcd, kube-apiserver,",
        "controller-manager and scheduler; KWOK nodes, GPU pods emulated by the kubelet stand-in.",
        "The operator runs behind the fault proxy under its own ServiceAccount and the ClusterRole",
        f"it generates. Steady-state window (I5): {steady_s:.0f} s; convergence bound (I4): 60 s;",
        f"wall time {wall_s / 60:.1f} min. ✓ pass, ✗ fail, – not judged (the scenario did not get",
        "that far: see its error).",
        "",
        "| scenario | what | "
        + " | ".join(INVARIANTS)
        + " | converge s | operator writes | result |",
        "|---|---|" + "---|" * len(INVARIANTS) + "---|---|---|",
    ]
    for o in outcomes:
        marks = {c.id: "✓" if c.ok else "✗" for c in o.checks}
        cells = [marks.get(i, "–") for i in INVARIANTS]
        seconds = "–" if o.convergence_s is None else f"{o.convergence_s:.1f}"
        writes = sum(o.writes.values())
        result = "pass" if o.passed else "**FAIL**"
        lines.append(
            f"| {o.id} | {o.title} | " + " | ".join(cells) + f" | {seconds} | {writes} | {result} |"
        )
    lines += ["", "## Failures", ""]
    for o in outcomes:
        if o.passed:
            continue
        lines.append(f"- **{o.id}** ({o.title}):")
        if o.error:
            lines.append(f"  error: `{o.error[:300]}`")
        for c in o.checks:
            if not c.ok:
                lines.append(f"  {c.id}: {c.detail[:400]}")
        for note in o.notes[:3]:
            lines.append(f"  note: {note[:300]}")
    lines += ["", "## Not run here", ""]
    lines += [f"- {k}: {v}" for k, v in SLOTS.items()]
    return "\n".join(lines) + "\n"


def earlier(path: Path) -> list[Outcome]:
    """The outcomes a previous run recorded in ``path`` (none when there is no file)."""
    if not path.is_file():
        return []
    found = []
    for raw in json.loads(path.read_text())["scenarios"]:
        checks = [Check(**c) for c in raw.pop("checks")]
        found.append(Outcome(**raw, checks=checks))
    return found


def record(out: Path, outcomes: Sequence[Outcome], *, steady_s: float, started: float) -> None:
    wall = time.monotonic() - started
    out.mkdir(parents=True, exist_ok=True)
    doc = to_json(outcomes, steady_s=steady_s, wall_s=wall)
    (out / "chaos.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "chaos.md").write_text(to_markdown(outcomes, steady_s=steady_s, wall_s=wall))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.chaos.runner", description=__doc__)
    parser.add_argument("--out", type=Path, default=repo_root() / "bench" / "results")
    parser.add_argument("--only", help="comma-separated scenario ids")
    parser.add_argument("--steady-seconds", type=float, default=STEADY_S)
    parser.add_argument(
        "--keep-earlier",
        action="store_true",
        help="keep the recorded results of scenarios this run does not repeat (with --only)",
    )
    parser.add_argument("--workdir", type=Path, default=binaries.cache_root() / "chaos-cluster")
    args = parser.parse_args(argv)
    if args.steady_seconds < 0:
        parser.error("--steady-seconds must be >= 0")
    scenarios = select(matrix(), args.only)
    started = time.monotonic()
    running = cluster.up(args.workdir, fleet_spec=FLEET, crds=None, operator=False, log=print)
    outcomes: list[Outcome] = []
    if args.keep_earlier:
        rerun = {s.id for s in scenarios}
        outcomes = [o for o in earlier(args.out / "chaos.json") if o.id not in rerun]
    try:
        lab = lab_mod.open_lab(running, steady_s=args.steady_seconds, fleet=FLEET)
        for scenario in scenarios:
            outcome = run(lab, scenario)
            outcomes.append(outcome)
            failed = [c.id for c in outcome.checks if not c.ok]
            verdict = "pass" if outcome.passed else f"FAIL {failed or outcome.error}"
            print(f"chaos: {scenario.id}: {verdict} ({outcome.wall_s:.0f} s)", flush=True)
            # Written after every scenario: an interrupted run still leaves what it judged.
            record(args.out, outcomes, steady_s=args.steady_seconds, started=started)
        lab_mod.close_lab(lab)
    finally:
        cluster.down(args.workdir, log=lambda _m: None)
        shutil.rmtree(args.workdir, ignore_errors=True)
    wall = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chaos.json").write_text(
        json.dumps(to_json(outcomes, steady_s=args.steady_seconds, wall_s=wall), indent=1) + "\n"
    )
    (args.out / "chaos.md").write_text(
        to_markdown(outcomes, steady_s=args.steady_seconds, wall_s=wall)
    )
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
