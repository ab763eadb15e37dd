"""``specdeploy dev``: the local control plane, from a checkout of the repository.

The harness behind it (``e2e/localcluster``, ``e2e/dev.py``) is development
code and is not in the wheel or the images: it builds Kubernetes from Go
modules, makes a PKI with openssl and stands in for the kubelet. This module
only finds the checkout (the one this package was installed from in
editable mode, else the working directory or one above it) and hands the
command to ``e2e.dev``; installed from a wheel it says so and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

MARKER = Path("e2e") / "dev.py"
EXIT_USAGE = 2


def checkout_root(start: Path | None = None) -> Path | None:
    """The specdeploy checkout this CLI runs from, or None (a wheel install)."""
    candidates = [Path(__file__).resolve().parents[2]]
    here = (start or Path.cwd()).resolve()
    candidates += [here, *here.parents]
    for root in candidates:
        if (root / MARKER).is_file() and (root / "pyproject.toml").is_file():
            return root
    return None


def register(subparsers: Any) -> None:
    """``dev`` and its sub-commands, from the checkout's ``e2e.dev``; a stub outside one."""
    root = checkout_root()
    if root is None:
        stub = subparsers.add_parser("dev", help="local control plane (from a checkout only)")
        stub.add_argument("rest", nargs=argparse.REMAINDER)
        stub.set_defaults(handler=_not_a_checkout)
        return
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.import_module("e2e.dev").register(subparsers)


def _not_a_checkout(_args: argparse.Namespace) -> int:
    print(
        "specdeploy dev: the local cluster runs from a checkout of the specdeploy "
        "repository (its harness, e2e/, is not part of the installed package); "
        "run it from the checkout's folder",
        file=sys.stderr,
    )
    return EXIT_USAGE
