"""``python -m e2e.fuzz``: the full fuzz run (``make fuzz``) on a local control plane.

Starts (or reuses, ``--workdir``) a local cluster, installs the CRDs, runs
the operator (a fresh process: one already running there is stopped first),
sends ``--specs`` generated specs, and writes ``fuzz_specs.{json,md}`` to
``--out``. Exit 0 with no violation, 1 with any (the specs that failed are
written as YAML fixtures to ``--save-failures`` for ``regressions/``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from e2e.fuzz import report as records
from e2e.fuzz.generate import generate
from e2e.fuzz.runner import Target, run
from e2e.localcluster import binaries, cluster, processes

FLEET = "h100=2,a100=2,l40s=2"
DEFAULT_SEED = 15


def target_of(running: cluster.Cluster) -> Target:
    def alive() -> bool:
        found = [r for r in processes.read_records(running.layout.run) if r.name == "operator"]
        return bool(found) and all(processes.alive(r) for r in found)

    return Target(
        api=running.api(),
        operator_log=running.layout.log("operator"),
        audit_log=running.layout.audit_log,
        operator_alive=alive,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.fuzz", description=__doc__)
    parser.add_argument("--specs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--only", type=int, nargs="*", help="replay these indices of the run")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--save-failures", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=binaries.cache_root() / "fuzz")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args(argv)
    if args.specs < 1 or args.batch < 1:
        parser.error("--specs and --batch must be at least 1")
    print(f"fuzz: generating {args.specs} specs (seed {args.seed})", flush=True)
    bodies = generate(args.specs, seed_value=args.seed)
    chosen = [bodies[i] for i in args.only] if args.only else bodies
    running = cluster.up(
        args.workdir,
        fleet_spec=FLEET,
        crds=None,
        operator=False,
        log=lambda m: print(m, flush=True),
    )
    cluster.stop(running, "operator")
    try:
        with cluster.operator_running(running):
            result = run(
                target_of(running),
                chosen,
                seed=args.seed,
                batch_size=args.batch,
                log=lambda m: print(m, flush=True),
            )
    finally:
        if not args.keep:
            cluster.down(args.workdir, log=lambda _m: None)
    data = records.write(result, args.out, specs=len(chosen), audit_log=running.layout.audit_log)
    if args.save_failures is not None:
        for path in records.save_failures(result, chosen, args.save_failures):
            print(f"fuzz: saved {path}")
    print(
        f"fuzz: {data['counts']}, {len(data['violations'])} violation(s), "
        f"{len(data['knownDefectViolations'])} of known defects, "
        f"{result.wall_seconds}s; {args.out}/fuzz_specs.md",
        flush=True,
    )
    for line in data["violations"][:40]:
        print(f"  {line}")
    return 1 if data["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
