"""The ramp plot: a PNG with load, outcomes and one panel per group of series."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from e2e.autoscale.timeline import groups, plot_ramp, since_start


def _rows(n: int, *, bucket: float = 1.0) -> list[dict[str, Any]]:
    return [
        {
            "t_s": i * bucket,
            "concurrency": 2.0 if i < n // 2 else 8.0,
            "started": 3,
            "ok": 3,
            "refused": 1 if i == n - 1 else 0,
            "failed": 0,
            "timed_out": 0,
            "output_tokens_per_s": 40.0 * (i + 1),
            "tpot_ms_mean": 20.0,
        }
        for i in range(n)
    ]


def test_it_writes_a_png_with_a_panel_per_group(tmp_path: Path) -> None:
    start = 1_700_000_000.0
    series = {
        "replicas: pool-a": since_start([(start, 1.0), (start + 4, 2.0), (start + 9, 1.0)], start),
        "replicas: pool-b": [(0.0, 1.0), (6.0, 3.0)],
        "K: pool-a": [(0.0, 3.0), (5.0, 1.0)],
    }
    out = tmp_path / "plots" / "ramp.png"
    titles = plot_ramp(_rows(10), series, out, title="ramp (modelled)")
    assert titles == ["load", "requests by outcome", "replicas", "K"]
    image = matplotlib.image.imread(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = image.shape[:2]
    assert width == 1000 and height > 700  # four panels stacked: taller than wide / 1.4


def test_without_series_it_draws_the_load_alone(tmp_path: Path) -> None:
    titles = plot_ramp(_rows(3, bucket=0.5), {}, tmp_path / "load.png")
    assert titles == ["load", "requests by outcome"]
    assert (tmp_path / "load.png").stat().st_size > 0


def test_series_group_by_the_text_before_the_colon() -> None:
    got = groups({"replicas: a": [], "K: a": [], "replicas: b": [], "other": []})
    assert {g: list(m) for g, m in got.items()} == {
        "replicas": ["a", "b"],
        "K": ["a"],
        "": ["other"],
    }


def test_since_start_moves_prometheus_samples_onto_the_runs_axis() -> None:
    assert since_start([(100.0, 1.0), (102.5, 2.0)], 100.0) == [(0.0, 1.0), (2.5, 2.0)]


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        pytest.param([], "no timeline rows", id="empty"),
        pytest.param([{"t_s": 0.0}], "lack concurrency", id="not-load-json"),
    ],
)
def test_rows_that_are_not_a_timeline_are_refused(
    tmp_path: Path, rows: list[dict[str, Any]], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        plot_ramp(rows, {}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
