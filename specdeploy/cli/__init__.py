"""The ``specdeploy`` console script: a thin dispatcher over sub-command modules.

One module per sub-command (``table``, ``simulate``, ``profile``, ``operator``,
``dev``, ``load``), each exposing ``register(subparsers)``, imported only when its
command runs: ``specdeploy table`` does not pay for the simulator.

Exit codes: 0 success, 1 unexpected error, 2 bad usage or invalid input
(argparse's convention, also used for invalid profile files).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from specdeploy.cli.version import __version__

# (command, module under specdeploy.cli, one-line help). A command's
# module is imported only when that command is asked for.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("table", "table", "derive, show and convert K tables (SpeculationProfiles)"),
    ("simulate", "simulate", "compare K policies on the simulator (modelled figures)"),
    ("dev", "dev", "local control plane: build, up, url, down"),
    ("profile", "profile", "measure ITL per (batch size, K) into a SpeculationProfile"),
    ("operator", "operator", "run the operator; generate its CRDs (crds/)"),
    ("load", "load", "closed-loop streaming load against a loopback server"),
    ("chart", "chart", "the Helm chart's generated files (charts/specdeploy)"),
)


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser, importing only the module of the command in ``argv``."""
    parser = argparse.ArgumentParser(
        prog="specdeploy",
        description="Speculative decoding on Kubernetes that adapts K to load and is never a loss.",
    )
    parser.add_argument("--version", action="version", version=f"specdeploy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module, help_text in COMMANDS:
        if name == wanted:
            mod = importlib.import_module(f"specdeploy.cli.{module}")
            mod.register(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result: int = handler(args)
    return result
