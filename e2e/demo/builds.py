"""What building the local cluster's binaries will cost, said before it starts.

A new machine builds five Go units (many minutes on two cores); a machine
that built them once reuses them in a fraction of a second. The demo says
which case it is in, and how long to expect, before ``build.sh`` starts: its
own lines (``built`` / ``reused``) follow as it goes.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from e2e.localcluster.binaries import UNIT_OF, Binaries, repo_root

Log = Callable[[str], None]
COLD_MINUTES: Mapping[str, float] = {
    "etcd": 1.6,
    "k8s": 18.0,
    "kwok": 4.2,
    "helm": 3.5,
    "prometheus": 7.5,
}
"""Cold build minutes per unit on the 2-core development machine under load (e2e/README.md)."""


def missing_units(missing_programs: Iterable[str]) -> list[str]:
    """The build units that produce the missing programs, in build order."""
    wanted = {UNIT_OF[program] for program in missing_programs}
    return [unit for unit in COLD_MINUTES if unit in wanted]


def estimate_line(units: list[str]) -> str:
    """One line: what will be built and about how long it takes, or that all is cached."""
    if not units:
        return "binaries: all cached (build.sh reuses them in about a second)"
    minutes = sum(COLD_MINUTES[u] for u in units)
    return (
        f"binaries: building {', '.join(units)} from their Go modules, once per machine "
        f"(about {minutes:.0f} min on 2 cores; cached in {Binaries.for_checkout().root})"
    )


PROGRESS_SECONDS = 60.0


def progress_line(elapsed_s: float, units: list[str]) -> str:
    total = sum(COLD_MINUTES[u] for u in units)
    return f"  still building: {elapsed_s / 60:.0f} min so far of about {total:.0f}"


def ensure_built(log: Log) -> float:
    """Build (or reuse) every unit, relaying build.sh's ``build:`` lines and a progress
    line every minute between them (the k8s unit alone is quiet for many minutes);
    the seconds it took."""
    started = time.monotonic()
    units = missing_units(Binaries.for_checkout().missing())
    log(estimate_line(units))
    script = repo_root() / "e2e" / "build" / "build.sh"
    lines: queue.Queue[str | None] = queue.Queue()
    with subprocess.Popen(
        [str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as build:
        threading.Thread(target=_pump, args=(build, lines), daemon=True).start()
        while (
            line := _next(lines, lambda: log(progress_line(_since(started), units)))
        ) is not None:
            if line.startswith("build:"):
                log(f"  {line.rstrip()} (at {_since(started):.0f} s)")
    if build.returncode != 0:
        raise RuntimeError(f"{script} exited {build.returncode}; run it alone to see why")
    return _since(started)


def _since(started: float) -> float:
    return time.monotonic() - started


def _pump(build: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert build.stdout is not None
    for line in build.stdout:
        lines.put(line)
    lines.put(None)


def _next(lines: queue.Queue[str | None], idle: Callable[[], None]) -> str | None:
    """The next line of build.sh (None at its end), calling ``idle`` each quiet minute."""
    while True:
        try:
            return lines.get(timeout=PROGRESS_SECONDS)
        except queue.Empty:
            idle()
