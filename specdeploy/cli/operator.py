"""``specdeploy operator``: run the controller, or regenerate and check its CRDs.

* ``run [--namespace NS ...] [--kubeconfig FILE] [--context NAME] [--metrics-port N]
  [--leader-elect[=BOOL]] [--leader-election-namespace NS] [--leader-election-id NAME]``:
  start the kopf operator (whole cluster by default), connected as kubectl
  would be, with its Prometheus ``/metrics`` on port 9401 unless told otherwise.
  It acts only while it holds the leader Lease (``--leader-elect=false``: at once,
  alone; for one dev process). ``--floor-restart-seconds`` and
  ``--floor-probe-after-seconds`` tune the live floor (``pool.live_floor``).
* ``crds [--out DIR] [--check]``: write ``crds/`` from the API models; with
  ``--check`` write nothing and exit 1 when the files are stale. ``crds --apply
  --from DIR [--kubeconfig FILE] [--context NAME]``: apply DIR's CRDs server-side
  (the chart's upgrade hook; ``specdeploy.chart.crd_apply``).
* ``rbac``: print the ClusterRole the operator needs (for the chart).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_METRICS_PORT = 9401
"""``specdeploy.operator.reactor.metrics.DEFAULT_PORT``, repeated so that building the parser
imports no operator code (a unit test holds them equal)."""
DEFAULT_LEASE = "specdeploy-operator"
"""``specdeploy.operator.naming.OPERATOR_LEASE``, repeated for the same reason."""
DEFAULT_FLOOR_RESTART_S = 120.0
DEFAULT_FLOOR_PROBE_S = 3600.0
"""``specdeploy.operator.config.DEFAULT_FLOOR``'s restart and probe seconds, repeated too."""
TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


def register(subparsers: Any) -> None:
    op = subparsers.add_parser("operator", help="run the operator; generate its CRDs")
    sub = op.add_subparsers(dest="operator_command", metavar="SUBCOMMAND", required=True)

    run = sub.add_parser("run", help="start the operator (kopf)")
    run.add_argument("--namespace", action="append", default=[], help="watch only this namespace")
    run.add_argument("--profiler-image", help="default image of the profiling Jobs")
    run.add_argument("--resync-seconds", type=float, default=300.0, help="re-list period")
    run.add_argument("--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument(
        "--metrics-port",
        type=_port,
        default=DEFAULT_METRICS_PORT,
        help=f"port of the operator's Prometheus /metrics (default {DEFAULT_METRICS_PORT}; 0: off)",
    )
    run.add_argument(
        "--metrics-addr", default="0.0.0.0", help="address /metrics binds (default all)"
    )
    run.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig file (default: $KUBECONFIG, the pod's ServiceAccount, ~/.kube/config)",
    )
    run.add_argument("--context", help="kubeconfig context (default: the current one)")
    run.add_argument(
        "--log-level",
        choices=("debug", "info", "warning"),
        default="info",
        help="specdeploy's own log level (debug: one line per reconcile); kopf's stays info",
    )
    _election_arguments(run)
    _floor_arguments(run)
    run.set_defaults(handler=_run)

    crds = sub.add_parser("crds", help="write the CRDs generated from the API models")
    crds.add_argument("--out", type=Path, default=ROOT / "crds", help="directory (default crds/)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files are stale")
    crds.add_argument(
        "--apply", action="store_true", help="apply the CRDs of --from DIR server-side instead"
    )
    crds.add_argument("--from", dest="source", type=Path, help="with --apply: the CRDs' directory")
    crds.add_argument("--kubeconfig", type=Path, help="with --apply: as for `operator run`")
    crds.add_argument("--context", help="with --apply: the kubeconfig context")
    crds.set_defaults(handler=_crds)

    rbac = sub.add_parser(
        "rbac", help="print the operator's ClusterRole (or, with --namespace, its Role)"
    )
    rbac.add_argument(
        "--namespace",
        help="the namespaced mode: a Role in NAMESPACE, plus a ClusterRole of cluster-scoped "
        "reads only (nodes, CRDs); run the operator with the same --namespace",
    )
    rbac.add_argument(
        "--leader-election-id",
        default=DEFAULT_LEASE,
        help=f"the Lease the role may renew (default {DEFAULT_LEASE})",
    )
    rbac.set_defaults(handler=_rbac)


def _election_arguments(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group("leader election (a Lease in coordination.k8s.io)")
    group.add_argument(
        "--leader-elect",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="act only while holding the leader Lease (default true; false: act at once)",
    )
    group.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="the same as --leader-elect=false: one process alone, e.g. for development",
    )
    group.add_argument(
        "--leader-election-namespace",
        help="the Lease's namespace (default $POD_NAMESPACE, the ServiceAccount's, "
        "the kubeconfig context's, else default)",
    )
    group.add_argument(
        "--leader-election-id",
        default=DEFAULT_LEASE,
        help=f"the Lease's name (default {DEFAULT_LEASE}); replicas that share it elect one",
    )
    for flag, default, what in (
        ("--leader-elect-lease-duration", 15, "how long a standby waits on a silent leader"),
        ("--leader-elect-renew-deadline", 10.0, "how long a leader may fail to renew"),
        ("--leader-elect-retry-period", 2.0, "how often leaders renew and standbys try"),
    ):
        group.add_argument(
            flag,
            type=int if isinstance(default, int) else _seconds,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default {default})",
        )


def _floor_arguments(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group(
        "the live floor (spec.speculation.fallback: vanilla; plain decoding on live evidence)"
    )
    group.add_argument(
        "--floor-restart-seconds",
        type=_seconds,
        default=DEFAULT_FLOOR_RESTART_S,
        metavar="SECONDS",
        help="what one serving replica's restart costs, model load to ready (default "
        f"{DEFAULT_FLOOR_RESTART_S:.0f}); a pool goes plain once its losing streak has "
        "lasted this long over the loss",
    )
    group.add_argument(
        "--floor-probe-after-seconds",
        type=_seconds,
        default=DEFAULT_FLOOR_PROBE_S,
        metavar="SECONDS",
        help="plain decoding this long without a canary window, then speculate again to "
        f"measure (default {DEFAULT_FLOOR_PROBE_S:.0f})",
    )


def _bool(text: str) -> bool:
    if text.lower() in TRUE:
        return True
    if text.lower() in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _seconds(text: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be > 0")
    return value


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not in 0..65535 (0: no endpoint)")
    return port


def _run(args: argparse.Namespace) -> int:
    from specdeploy.operator.config import Config, FloorSettings
    from specdeploy.operator.main import run

    floor = FloorSettings(
        restart_seconds=args.floor_restart_seconds,
        probe_after_seconds=args.floor_probe_after_seconds,
    )
    config = Config(floor=floor)
    if args.profiler_image:
        config = dataclasses.replace(config, profiler_image=args.profiler_image)
    election = _election(args)
    run(
        election=election,
        namespaces=args.namespace,
        config=config,
        resync_seconds=args.resync_seconds,
        liveness_endpoint=args.liveness,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        kubeconfig=args.kubeconfig,
        context=args.context,
        log_level=args.log_level,
    )
    return 0


def _election(args: argparse.Namespace) -> Any:
    """The run's ``main.Election`` (None without leader election); bad timings exit 2."""
    from specdeploy.operator.main import Election
    from specdeploy.operator.reactor.leader import Timing

    if not args.leader_elect:
        return None
    try:
        timing = Timing(
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
        )
    except ValueError as err:
        print(f"specdeploy operator run: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    return Election(
        namespace=args.leader_election_namespace, name=args.leader_election_id, timing=timing
    )


def _crds(args: argparse.Namespace) -> int:
    from specdeploy.operator import crdgen

    if args.apply:
        return _apply_crds(args)
    if args.check:
        problems = crdgen.stale_files(args.out)
        for problem in problems:
            print(f"{problem} (run `specdeploy operator crds`)", file=sys.stderr)
        return 1 if problems else 0
    for path in crdgen.write(args.out):
        print(path)
    return 0


def _apply_crds(args: argparse.Namespace) -> int:
    """Apply ``--from``'s CRDs; a bad directory exits 2, a refusal by the API server 1."""
    from specdeploy.chart import crd_apply
    from specdeploy.operator.clients import k8s

    if args.source is None or args.check:
        print("specdeploy operator crds: --apply needs --from DIR, not --check", file=sys.stderr)
        return 2
    try:
        requests = crd_apply.requests_for(crd_apply.load(args.source))
    except (OSError, yaml.YAMLError, crd_apply.NotACrd) as err:
        print(f"specdeploy operator crds: {err}", file=sys.stderr)
        return 2
    try:
        for done in crd_apply.apply(k8s.connect(args.kubeconfig, args.context), requests):
            print(done)
    except k8s.ApiError as err:
        print(f"specdeploy operator crds: {err}", file=sys.stderr)
        return 1
    return 0


def _rbac(args: argparse.Namespace) -> int:
    from specdeploy.operator.builders.rbac import operator_cluster_role, operator_namespaced_roles

    lease = args.leader_election_id
    if args.namespace:
        docs = operator_namespaced_roles(args.namespace, lease=lease)
        sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    else:
        sys.stdout.write(yaml.safe_dump(operator_cluster_role(lease=lease), sort_keys=False))
    return 0
