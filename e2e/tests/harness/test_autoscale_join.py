"""Joining a load run's timeline with Prometheus' matrices on one time axis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.autoscale.join import matrix_series, read_load

START = 1_700_000_000.0


def test_a_query_range_result_becomes_named_series_since_the_start() -> None:
    matrix = [
        {"metric": {"pool": "h100", "job": "x"}, "values": [[START, "1"], [START + 15, "2"]]},
        {"metric": {"pool": "a10"}, "values": [[START + 30, "NaN"], [START + 45, "3"]]},
    ]
    got = matrix_series("replicas", matrix, label="pool", started_at_unix=START)
    assert got == {"replicas: h100": [(0.0, 1.0), (15.0, 2.0)], "replicas: a10": [(45.0, 3.0)]}


def test_the_load_json_gives_its_rows_and_their_place_on_the_wall_clock(tmp_path: Path) -> None:
    rows = [{"t_s": 0.0}, {"t_s": 0.5}, {"t_s": 1.0}]
    doc = {"kind": "specdeploy-load", "version": 2, "summary": {}, "rows": []}
    doc["timeline"] = {"bucket_s": 0.5, "started_at_unix": START, "rows": rows}
    path = tmp_path / "load.json"
    path.write_text(json.dumps(doc))
    load = read_load(path)
    assert (load.rows, load.started_at_unix, load.bucket_s) == (rows, START, 0.5)
    assert load.end_unix == START + 1.5


def test_a_load_json_without_a_timeline_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"kind": "specdeploy-load", "version": 1, "summary": {}}))
    with pytest.raises(ValueError, match="version >= 2"):
        read_load(path)


def test_what_specdeploy_load_writes_is_what_plot_ramp_reads(tmp_path: Path) -> None:
    from e2e.autoscale.timeline import plot_ramp
    from specdeploy.cli.loadgen.config import LoadConfig
    from specdeploy.cli.loadgen.ramp import parse_ramp
    from specdeploy.cli.loadgen.report import document
    from specdeploy.cli.loadgen.results import Measured, RequestResult
    from specdeploy.cli.loadgen.runner import LoadRun

    config = LoadConfig(url="http://127.0.0.1:8000", model="m", ramp=parse_ramp("2s@1,2s@3"))
    done = Measured(sent_at=10.2, ended_at=11.0, reason=None, status=200, output_tokens=5,
                    tokens_from="usage", first_token_at=10.4, last_token_at=11.0)  # fmt: skip
    run = LoadRun(config, "built-in", results=[RequestResult(0, 0, 0.2, done)], sent=1)
    run.started_s, run.elapsed_s, run.clock_start, run.started_at_unix = [0.2], 4.0, 10.0, START
    path = tmp_path / "load.json"
    path.write_text(json.dumps(document(run)))
    load = read_load(path)
    series = matrix_series(
        "replicas", [{"metric": {"pool": "p"}, "values": [[START + 1, "1"]]}],
        label="pool", started_at_unix=load.started_at_unix,
    )  # fmt: skip
    titles = plot_ramp(load.rows, series, tmp_path / "ramp.png")
    assert titles == ["load", "requests by outcome", "replicas"]
    assert [r["concurrency"] for r in load.rows] == [1.0, 1.0, 3.0, 3.0]
