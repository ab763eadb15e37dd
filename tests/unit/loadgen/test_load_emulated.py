"""A ramp against the local cluster's emulated vLLM server, stopped under load (loopback).

What issue 17's scale-down needs from the load generator, on the real
serving code path: the ramp's stages reach the server as concurrency, a
server that drains (SIGTERM: 503 to new requests, in-flight ones finish)
and then closes its port yields refusals, never failures or hangs, and the
timeline shows when. The server runs 50x faster than real time (modelled
timings), so each request lasts milliseconds.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

from e2e.time_scale import scaled
from specdeploy.cli.loadgen.config import LoadConfig
from specdeploy.cli.loadgen.ramp import parse_ramp
from specdeploy.cli.loadgen.report import document, exit_code
from tests.unit.emulated.server_process import (
    SERVED,
    base_env,
    free_port,
    running,
    serve_args,
    write_table,
)

SCHEDULE = [[1, 256, 3]]
RAMP = "0.8s@1,0.8s@6,1.2s@2"
STOP_AT_S = 2.0
"""Inside the last stage: the server drains and goes away with the load still on."""


def test_a_ramp_meets_a_server_that_drains_and_goes_away_without_losing_a_request(
    tmp_path: Path,
) -> None:
    write_table(tmp_path, SCHEDULE)
    port, metrics_port = free_port(), free_port()
    env = base_env(tmp_path, metrics_port)
    args = serve_args(port, SCHEDULE)
    config = LoadConfig(
        url=f"http://127.0.0.1:{port}",
        model=SERVED,
        ramp=parse_ramp(RAMP),
        max_tokens=24,
        ignore_eos=True,
        timeout_s=5.0,
        backoff_s=0.05,
        timeline_bucket_s=0.4,
    )
    with running(tmp_path, args, env, port=port, metrics_port=metrics_port) as server:
        from specdeploy.cli.loadgen.runner import LoadRunner

        async def main() -> dict[str, Any]:
            loop = asyncio.get_running_loop()
            loop.call_later(STOP_AT_S, server.proc.send_signal, signal.SIGTERM)
            return document(await LoadRunner(config).run())

        doc = asyncio.run(main())
        assert server.proc.wait(timeout=15) == 0, server.output()
    summary, rows = doc["summary"], doc["timeline"]["rows"]
    counts = summary["requests"]
    assert counts["ok"] > 20 and counts["refused"] > 0, counts
    lost = counts["failed"] + counts["timed_out"] + counts["cancelled"]
    assert lost == 0, f"lost {lost}; by reason: {counts['by_reason']}"
    assert exit_code(summary) == 0
    assert summary["max_in_flight"] == 6 and summary["elapsed_s"] < 2.8 + scaled(1.0)
    # the stop is timed from before the run's own start: a bucket's margin either side
    before_stop = [r for r in rows if r["t_s"] + 0.4 <= STOP_AT_S - 0.2]
    assert sum(r["refused"] for r in before_stop) == 0  # refusals only once it stopped
    assert sum(r["ok"] for r in rows if r["t_s"] >= STOP_AT_S + 0.4) == 0
    assert [r["concurrency"] for r in rows[:2]] == [1.0, 1.0] and rows[2]["concurrency"] == 6.0
