"""``specdeploy chart generate [--check]``: the Helm chart's generated files.

``generate`` writes ``charts/specdeploy``'s schema, RBAC rules and CRD copies
(``specdeploy.chart.generate``); with ``--check`` it writes nothing and exits 1
when any is stale, as ``specdeploy operator crds --check`` does for ``crds/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    chart = subparsers.add_parser("chart", help="the Helm chart's generated files")
    sub = chart.add_subparsers(dest="chart_command", metavar="SUBCOMMAND", required=True)
    gen = sub.add_parser("generate", help="write values.schema.json, RBAC rules, crds/")
    gen.add_argument("--chart", type=Path, help="chart directory (default charts/specdeploy)")
    gen.add_argument("--crds", type=Path, help="the CRDs to copy (default crds/)")
    gen.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    gen.set_defaults(handler=_generate)


def _generate(args: argparse.Namespace) -> int:
    from specdeploy.chart import generate

    chart = args.chart or generate.CHART
    crds = args.crds or generate.CRDS
    if args.check:
        problems = generate.stale_files(chart, crds)
        for problem in problems:
            print(f"{problem} (run `specdeploy chart generate`)", file=sys.stderr)
        return 1 if problems else 0
    for path in generate.write(chart, crds):
        print(path)
    return 0
