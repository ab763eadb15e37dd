"""Progress: periodic log lines off a TTY, a redrawn bar with an ETA on one."""

from __future__ import annotations

import io

from specdeploy.runtime.profiler.backend import CellSample
from specdeploy.runtime.profiler.progress import Progress, duration
from specdeploy.runtime.profiler.sampling import CellStats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _stats(bs: int, k: int) -> CellStats:
    stats = CellStats(bs, k)
    stats.add(CellSample(bs, k, [0.0125] * 16))
    return stats


def test_log_mode_writes_one_line_per_interval_with_an_eta() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, interactive=False, interval_s=10, clock=clock)
    for i in range(1, 5):
        clock.now += 4  # a cell every 4 s; a line at most every 10 s
        progress.cell_started(8, i)
        progress.cell_done(_stats(8, i), done=i, planned=10)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # at 4 s (the first) and 16 s; 8 s and 12 s are too soon
    assert lines[0].startswith("specdeploy profile: 1/~10 cells, bs=8 K=1 ITL 12.500 ms")
    assert "elapsed 4s, eta ~36s" in lines[0]  # 4 s per cell, 9 cells to go
    assert "4/~10 cells" in lines[1] and "elapsed 16s, eta ~24s" in lines[1]
    assert "\r" not in out.getvalue()


def test_log_mode_with_zero_interval_logs_every_cell_and_the_summary() -> None:
    out = io.StringIO()
    progress = Progress(out, interactive=False, interval_s=0, clock=Clock())
    for i in range(1, 4):
        progress.cell_done(_stats(1, 0), done=i, planned=3)
    progress.finish("done: 3 cells")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[-1] == "specdeploy profile: done: 3 cells"


def test_a_non_tty_stream_is_detected_as_log_mode() -> None:
    assert Progress(io.StringIO()).interactive is False


def test_tty_mode_redraws_a_bar_in_place() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, interactive=True, clock=clock)
    clock.now += 30
    progress.cell_started(64, 3)
    progress.cell_done(_stats(64, 3), done=6, planned=24)
    text = out.getvalue()
    assert text.count("\r") == 2 and "\n" not in text
    last = text.split("\r")[-1]
    assert "[######------------------] 6/~24 cells  bs=64 K=3  30s eta ~1m30s" in last


def test_durations_read_like_a_human_wrote_them() -> None:
    assert [duration(s) for s in (0, 42, 185, 3720)] == ["0s", "42s", "3m05s", "1h02m"]
