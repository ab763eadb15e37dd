"""One factor for every wall-clock upper bound a test asserts: ``SPECDEPLOY_TIME_SCALE``.

An upper bound on seconds ("the standby leads within 35 s", "the pool is back
at one within 40 s", "the load run ends within 0.9 s") says the system is
fast enough on a quiet machine; on a loaded 2-core box or a slower CPU the
same code takes longer, and the test fails for the machine, not for the
code. Where the bound can count the system's own ticks instead (telemetry
intervals, table generations, Lease transitions) the test does that; the
rest multiply their bound by this one factor, so a slow or busy machine is
one setting (``SPECDEPLOY_TIME_SCALE=2``), not a hunt through test files.
Lower bounds ("it waited out the window") never scale: a slower machine
cannot make them fail.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "SPECDEPLOY_TIME_SCALE"


def factor(environ: Mapping[str, str] = os.environ) -> float:
    """The factor (default 1): a number of at least 1, else a ValueError naming the variable."""
    raw = environ.get(ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: not a number") from None
    if not value >= 1.0:
        raise ValueError(f"{ENV}={raw!r}: must be at least 1 (it only widens bounds)")
    return value


def scaled(seconds: float) -> float:
    """An upper bound of ``seconds`` on a quiet machine, widened by the factor."""
    return seconds * factor()
