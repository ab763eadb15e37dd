"""Progress of a profile: a bar with an ETA on a terminal, log lines otherwise.

A profiling Job's log is read after the fact (``kubectl logs``), where a
carriage-return bar is noise: off a TTY, one line per cell at most every
``interval_s`` seconds, plus the last one. On a TTY, one line redrawn in
place. The ETA is elapsed time per cell times the cells the search still
expects; the smart search revises that estimate as it learns, so the ETA
is an estimate and says so with a ``~``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from specdeploy.runtime.profiler.sampling import CellStats

BAR_WIDTH = 24


def duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """A ``grid.Observer`` that reports on ``stream``."""

    def __init__(
        self,
        stream: TextIO,
        *,
        interactive: bool | None = None,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        prefix: str = "specdeploy profile",
    ) -> None:
        self.stream = stream
        self.interactive = _isatty(stream) if interactive is None else interactive
        self.interval_s = interval_s
        self.clock = clock
        self.prefix = prefix
        self.started = clock()
        self.last_line: float | None = None
        self.done = 0
        self.planned = 0
        self.current = ""

    def cell_started(self, batch_size: int, k: int) -> None:
        self.current = f"bs={batch_size} K={k}"
        if self.interactive:
            self._draw()

    def cell_done(self, stats: CellStats, *, done: int, planned: int, what: str = "") -> None:
        self.done, self.planned = done, max(planned, done)
        now = self.clock()
        if self.interactive:
            self._draw()
        elif self.last_line is None or now - self.last_line >= self.interval_s:
            self.last_line = now
            self.stream.write(self._log_line(stats, now, what) + "\n")
            self.stream.flush()

    def finish(self, summary: str) -> None:
        """End the bar (on a TTY) and print the summary line."""
        if self.interactive:
            self.stream.write("\r\033[K")
        self.stream.write(f"{self.prefix}: {summary}\n")
        self.stream.flush()

    def eta(self, now: float) -> float | None:
        if self.done == 0:
            return None
        return (now - self.started) / self.done * (self.planned - self.done)

    def _eta_text(self, now: float) -> str:
        eta = self.eta(now)
        return "eta ?" if eta is None else f"eta ~{duration(eta)}"

    def _log_line(self, stats: CellStats, now: float, what: str = "") -> str:
        rel = stats.relative_half_width() * 100
        cell = f"bs={stats.batch_size} " + (what or f"K={stats.k}")
        return (
            f"{self.prefix}: {self.done}/~{self.planned} cells, "
            f"{cell} ITL {stats.itl_ms:.3f} ms "
            f"±{rel:.1f}% ({stats.samples} steps, {stats.repeats} repeats), "
            f"elapsed {duration(now - self.started)}, {self._eta_text(now)}"
        )

    def _draw(self) -> None:
        now = self.clock()
        frac = self.done / self.planned if self.planned else 0.0
        filled = round(BAR_WIDTH * min(frac, 1.0))
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self.stream.write(
            f"\r\033[K[{bar}] {self.done}/~{self.planned} cells  {self.current}  "
            f"{duration(now - self.started)} {self._eta_text(now)}"
        )
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
