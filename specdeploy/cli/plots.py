"""Whether charts can be drawn: matplotlib is the ``plots`` extra, not a core dependency.

A ``--plot`` flag is checked before any work starts, so a missing extra is
an immediate usage error naming the install command, not a traceback after
a long simulation.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "pip install 'specdeploy[plots]'"


def missing_plots(flag: str = "--plot") -> str | None:
    """The error message when matplotlib is not installed, else None."""
    if importlib.util.find_spec("matplotlib") is not None:
        return None
    return f"{flag} needs matplotlib, which is not installed: {INSTALL_HINT}"
