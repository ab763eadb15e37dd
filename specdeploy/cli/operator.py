"""``specdeploy operator``: run the controller, or regenerate and check its CRDs.

* ``run [--namespace NS ...] [--kubeconfig FILE] [--context NAME] [--metrics-port N]``:
  start the kopf operator (whole cluster by default), connected as kubectl
  would be, with its Prometheus ``/metrics`` on port 9401 unless told otherwise.
* ``crds [--out DIR] [--check]``: write ``crds/`` from the API models; with
  ``--check`` write nothing and exit 1 when the files are stale.
* ``rbac``: print the ClusterRole the operator needs (for the chart).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_METRICS_PORT = 9401
"""``specdeploy.operator.metrics.DEFAULT_PORT``, repeated so that building the parser
imports no operator code (a unit test holds them equal)."""


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
    run.set_defaults(handler=_run)

    crds = sub.add_parser("crds", help="write the CRDs generated from the API models")
    crds.add_argument("--out", type=Path, default=ROOT / "crds", help="directory (default crds/)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files are stale")
    crds.set_defaults(handler=_crds)

    rbac = sub.add_parser(
        "rbac", help="print the operator's ClusterRole (or, with --namespace, its Role)"
    )
    rbac.add_argument(
        "--namespace",
        help="the namespaced mode: a Role in NAMESPACE, plus a ClusterRole of cluster-scoped "
        "reads only (nodes, CRDs); run the operator with the same --namespace",
    )
    rbac.set_defaults(handler=_rbac)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not in 0..65535 (0: no endpoint)")
    return port


def _run(args: argparse.Namespace) -> int:
    from specdeploy.operator.decide import Config
    from specdeploy.operator.main import run

    config = Config(profiler_image=args.profiler_image) if args.profiler_image else Config()
    run(
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


def _crds(args: argparse.Namespace) -> int:
    from specdeploy.operator import crdgen

    if args.check:
        problems = crdgen.stale_files(args.out)
        for problem in problems:
            print(f"{problem} (run `specdeploy operator crds`)", file=sys.stderr)
        return 1 if problems else 0
    for path in crdgen.write(args.out):
        print(path)
    return 0


def _rbac(args: argparse.Namespace) -> int:
    from specdeploy.operator.builders.rbac import operator_cluster_role, operator_namespaced_roles

    if args.namespace:
        docs = operator_namespaced_roles(args.namespace)
        sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    else:
        sys.stdout.write(yaml.safe_dump(operator_cluster_role(), sort_keys=False))
    return 0
