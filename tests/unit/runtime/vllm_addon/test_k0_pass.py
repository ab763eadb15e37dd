"""The drafter's K=0 pass ledger (``vllm_addon.k0_pass``): what is timed, shared and exported.

vLLM's own worker and engine core are exercised by the nightly
``tests/model/test_addon_eagle_k0.py``; here stand-ins for the runner and
the scheduler's output, and two ledgers on one file as the two processes.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specdeploy.runtime.vllm_addon import k0_pass, plain_step
from tests.unit.runtime.vllm_addon.test_plain_step import Runner


def output(requests: int, *, k: int = 0, drafts: int = 0, prefill: int = 0) -> SimpleNamespace:
    """A scheduler output: ``requests`` decoding one token plus ``drafts`` each, and
    one more request prefilling ``prefill`` tokens when given."""
    scheduled = {f"r{i}": 1 + drafts for i in range(requests)}
    spec = {f"r{i}": [5] * drafts for i in range(requests)} if drafts else {}
    if prefill:
        scheduled["p"] = prefill
    return SimpleNamespace(
        num_scheduled_tokens=scheduled,
        scheduled_spec_decode_tokens=spec,
        total_num_scheduled_tokens=sum(scheduled.values()),
        num_spec_tokens_to_schedule=k,
    )


def test_only_decode_only_steps_count() -> None:
    assert k0_pass.decode_only(output(4)) == 4
    assert k0_pass.decode_only(output(3, drafts=2)) == 3
    assert k0_pass.decode_only(output(3, prefill=40)) == 0


def test_the_writer_and_the_reader_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.f64")
    reader = k0_pass.PassLedger(path, create=False)
    assert reader.totals() == {}, "nothing before the worker's first pass"
    writer = k0_pass.PassLedger(path, create=True)
    writer.add(1, 0.002)
    writer.add(1, 0.004)
    writer.add(12, 0.010)
    totals = reader.totals()
    assert set(totals) == {0, 4}
    assert abs(totals[0][0] - 0.006) < 1e-12 and totals[0][1] == 2
    assert totals[4] == (0.010, 1.0)
    again = k0_pass.PassLedger(path, create=True)  # an engine restarted in the same process
    assert again.totals() == totals, "the file is never truncated"


def test_the_first_process_sets_the_path_its_children_inherit(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    path = k0_pass.claim_path(env)
    assert env[k0_pass.LEDGER_ENV] == path and path.endswith(".f64")
    assert k0_pass.claim_path(env) == path
    assert k0_pass.claim_path({k0_pass.LEDGER_ENV: "/x/y"}) == "/x/y"


def test_a_stateful_drafters_k0_pass_runs_and_is_timed_on_a_cpu_decode_step(
    tmp_path: Path, monkeypatch: Any
) -> None:
    ledger = k0_pass.PassLedger(str(tmp_path / "l.f64"), create=True)
    monkeypatch.setattr(k0_pass, "worker_ledger", lambda: ledger)
    cls = type("PatchedRunner", (Runner,), {})
    plain_step.patch(cls, "propose_draft_token_ids", plain_step.skipping_propose)

    eagle = cls("eagle")
    assert eagle.propose_draft_token_ids(output(3), [[1], [2], [3]]) == [[], [], []]
    assert eagle.drafted == 1, "the pass still runs (its KV follows the target)"
    eagle.propose_draft_token_ids(output(3, prefill=30), [[1]] * 4)  # a prefill rode along
    eagle.propose_draft_token_ids(output(3, k=2), [[1]] * 3)  # K > 0: drafts, not the K=0 pass
    assert eagle.drafted == 3
    assert ledger.totals().keys() == {2} and ledger.totals()[2][1] == 1

    cls("mtp").propose_draft_token_ids(output(3), [[1]] * 3)  # not in EMPTY_AT_K0_METHODS
    cls("eagle", device="xpu").propose_draft_token_ids(output(3), [[1]] * 3)  # no clock for it
    ngram = cls("ngram")
    ngram.propose_draft_token_ids(output(3), [[1]] * 3)
    assert ngram.drafted == 0, "a stateless drafter is skipped, no pass to time"
    assert ledger.totals()[2][1] == 1


def test_without_a_ledger_the_pass_runs_untimed() -> None:
    runner = Runner("eagle")
    out = k0_pass.timed_pass(
        runner, lambda: runner.propose_draft_token_ids(output(2), [[1], [2]]), output(2),
        ledger=lambda: None,
    )  # fmt: skip
    assert out == [[], []] and runner.drafted == 1


def test_the_add_on_exports_the_ledger_when_scraped(tmp_path: Path) -> None:
    path = str(tmp_path / "l.f64")
    env = {k0_pass.LEDGER_ENV: path}
    series = k0_pass.series_for("cpu", env)
    assert series is not None and k0_pass.series_for("cpu", {}) is None
    registry = CollectorRegistry()
    registry.register(series)
    assert b"specdeploy_drafter_k0" not in generate_latest(registry), "no pass, no series"
    k0_pass.PassLedger(path, create=True).add(16, 0.003)
    text = generate_latest(registry).decode()
    assert 'specdeploy_drafter_k0_passes_total{batch_bucket="9-16",pool="cpu"} 1.0' in text
    assert 'specdeploy_drafter_k0_pass_seconds_total{batch_bucket="9-16",pool="cpu"} 0.003' in text


class Event:
    """Stands in for ``torch.cuda.Event``: done once the test says the GPU ran it."""

    clock = 0.0

    def __init__(self) -> None:
        self.at: float | None = None
        self.done = False

    def record(self) -> None:
        self.at = Event.clock

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, end: Event) -> float:
        assert self.at is not None and end.at is not None
        return end.at - self.at  # ms


def test_on_a_gpu_the_pass_is_read_from_cuda_events_once_they_completed(tmp_path: Path) -> None:
    ledger = k0_pass.PassLedger(str(tmp_path / "l.f64"), create=True)
    clock = k0_pass.CudaClock(Event, limit=2)
    runner = Runner("eagle", device="cuda")

    def gpu_pass(ms: float) -> Any:
        def run() -> Any:
            Event.clock += ms  # the pass's kernels, as the GPU will run them
            return runner.propose_draft_token_ids(output(4), [[1]] * 4)

        return run

    k0_pass.timed_pass(runner, gpu_pass(3.0), output(4), lambda: ledger, clock)
    assert ledger.totals() == {}, "not read before the GPU ran it: no sync added"
    for _, _, end in clock.pending:
        end.done = True
    k0_pass.timed_pass(runner, gpu_pass(5.0), output(4), lambda: ledger, clock)
    seconds, passes = ledger.totals()[2]
    assert seconds == pytest.approx(0.003) and passes == 1.0
    for _ in range(3):  # never completed: at most ``limit`` wait, older ones dropped
        k0_pass.timed_pass(runner, gpu_pass(1.0), output(4), lambda: ledger, clock)
    assert len(clock.pending) == 2 and ledger.totals()[2][1] == 1.0
