"""End to end on CPU: ``vllm serve`` with the add-on and an EAGLE head, K=0 and back.

EAGLE keeps its K=0 pass (its KV cache follows the target's tokens), and
after a K=0 step the add-on's scheduler tells the engine core not to fetch
drafts, which vLLM leaves empty at K=0 (``plain_step.EMPTY_AT_K0_METHODS``).
Here the table runs K=0 at batch 1 and K=3 from batch 2: requests at
concurrency 1, then 4, then 1 again. The steps follow the table, drafts are
proposed and verified again after the K=0 spell (the fetch resumed), and the
greedy answers at concurrency 1 are the same before and after. The head is
untrained (``ensure_untrained_head``): it drafts badly, which changes no
greedy answer (verification keeps the target's tokens) and nothing this test
reads. A fourth engine boot, so nightly (``tests/tiers.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.vllm_server import free_port, running
from tests.model.test_addon_e2e import (
    addon_env,
    by_bucket_and_k,
    checkpoint,
    complete,
    load,
    minus,
    scrape,
    serve_command,
)

pytestmark = pytest.mark.timeout(900)

SCHEDULE = [[1, 1, 0], [2, 16, 3]]
TABLE = {"policy": "table", "maxK": 3, "schedule": SCHEDULE}
POOL = frozenset({("pool", "cpu")})


def untrained_head(python: Path, env: dict[str, str], target: str) -> str:
    code = (
        "import sys; from pathlib import Path; from e2e.models import eagle; "
        "print(eagle.ensure_untrained_head(target=Path(sys.argv[1])))"
    )
    done = subprocess.run(
        [str(python), "-c", code, target], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def server(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path_factory: Any
) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("serve-eagle")
    table = folder / "table.json"
    table.write_text(json.dumps(TABLE))
    http, metrics = free_port(), free_port()
    env = addon_env(vllm_env, table, metrics)
    model = checkpoint(vllm_python, vllm_env)
    speculative = {
        "method": "eagle",
        "model": untrained_head(vllm_python, vllm_env, model),
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": SCHEDULE,
    }
    log = folder / "vllm.log"
    with running(serve_command(vllm_python, model, http, speculative), env, log, http):
        yield {"http": http, "metrics": metrics, "log": log}


def drafted(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
    return metrics.get(("specdeploy_draft_tokens_total", POOL | {("position", "1")}), 0.0)


def pass_totals(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> dict[str, tuple[float, float]]:
    """(seconds, passes) of the drafter's K=0 pass per batch bucket."""
    out: dict[str, tuple[float, float]] = {}
    for (name, labels), value in metrics.items():
        if name == "specdeploy_drafter_k0_passes_total":
            bucket = dict(labels)["batch_bucket"]
            seconds = metrics[("specdeploy_drafter_k0_pass_seconds_total", labels)]
            out[bucket] = (seconds, value)
    return out


def test_eagle_drafts_again_after_k0_steps_whose_fetch_was_skipped(
    server: dict[str, Any],
) -> None:
    port = server["http"]
    start = scrape(server)
    first = complete(port)
    after_first = scrape(server)
    spell = load(port, 4, 8)
    after_spell = scrape(server)
    again = complete(port)
    end = scrape(server)

    alone = minus(by_bucket_and_k(after_first), by_bucket_and_k(start))
    assert alone and all(k == 0 for (bucket, k) in alone if bucket == "1"), alone
    assert drafted(after_first) == drafted(start), "K=0 steps propose nothing"
    busy = minus(by_bucket_and_k(after_spell), by_bucket_and_k(after_first))
    assert sum(v for (bucket, k), v in busy.items() if k == 3) >= 10, busy
    assert drafted(after_spell) > drafted(after_first), "the drafts came back after K=0"
    assert all(a.strip() for a in spell)
    back = minus(by_bucket_and_k(end), by_bucket_and_k(after_spell))
    assert back.get(("1", 0), 0) >= 10, back
    assert first == again, "greedy at batch 1, before and after the K=3 spell"
    # The head's K=0 pass, timed in the worker and exported by the add-on (k0_pass): one per
    # clean K=0 step, a part of the step; the step minus it is the pod's plain step.
    passes = pass_totals(end)
    steps = by_bucket_and_k(end).get(("1", 0), 0.0)
    step_seconds = end.get(
        ("specdeploy_step_seconds_sum", POOL | {("batch_bucket", "1"), ("k", "0")})
    )
    assert "1" in passes, passes
    seconds, count = passes["1"]
    print(
        f"K=0 at batch 1: {count:.0f} passes, {1000 * seconds / count:.2f} ms each; "
        f"{steps:.0f} steps, {1000 * (step_seconds or 0) / max(steps, 1):.2f} ms each"
    )
    assert 0.8 * steps <= count <= 1.2 * steps, (count, steps)
    assert step_seconds is not None and 0 < seconds < step_seconds
    log = server["log"].read_text()
    assert re.search(r"steps without drafts sample plainly \(pid \d+\)", log)
