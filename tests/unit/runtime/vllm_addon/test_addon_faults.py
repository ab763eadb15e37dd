"""The add-on never takes the engine down (issue 15, deliverable 5; review M11).

Inverted probes of ``reviews/probes/test_reliability_probes.py``: at 7a48b4a a
policy answering ``None`` raised TypeError on the hot path, a metrics bug
escaped ``step_done`` into the engine loop, and an install callback's bug
escaped the table watcher. Now each costs at most vLLM's own schedule,
counted and logged once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.vllm_addon.controller import KController
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from specdeploy.runtime.vllm_addon.table_source import EngineShape, LoadedTable
from specdeploy.runtime.vllm_addon.watcher import TableWatcher

LOOKUP = [3] * 5 + [1] * 60
SHAPE = EngineShape(3, 64, allowed_k=(0, 1, 2, 3))


class Answers(FixedPolicy):
    def __init__(self, answer: Any) -> None:
        super().__init__(1)
        self.answer = answer

    def choose_k(self, batch_size: int) -> Any:
        return self.answer


@pytest.mark.parametrize("answer", [None, 2.0, -1, "2"], ids=["None", "float", "negative", "str"])
def test_a_policy_answering_a_non_k_costs_the_step_vllms_own_k(answer: Any) -> None:
    metrics = AddonMetrics("p", 3)
    c = KController(LOOKUP, SHAPE, metrics)
    c.install(LoadedTable("fixed", Answers(answer), (), "", "d"))
    assert c.choose_k(4) == LOOKUP[4]
    assert c.choose_k(30) == LOOKUP[30]
    text = generate_latest(metrics.registry).decode()
    assert 'specdeploy_policy_errors_total{pool="p"} 2.0' in text


class BrokenMetrics(AddonMetrics):
    def step(self, *a: Any, **k: Any) -> None:
        raise ValueError("metrics bug")


def test_a_metrics_failure_trips_the_fuse_instead_of_the_engine(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = BrokenMetrics("p", 3)
    c = KController(LOOKUP, SHAPE, metrics)
    c.install(LoadedTable("fixed", FixedPolicy(2), (), "", "d"))
    assert c.choose_k(30) == 2, "the add-on chooses before the fault"
    with caplog.at_level(logging.ERROR, logger="specdeploy.addon"):
        for _ in range(3):
            c.step_done(4, 2, 0.01, [(2, 1)])  # no exception reaches the caller
    assert c.tripped == "metrics"
    assert c.choose_k(30) == LOOKUP[30], "vLLM's own schedule after the fault"
    assert sum("add-on fault in metrics" in r.getMessage() for r in caplog.records) == 1
    text = generate_latest(metrics.registry).decode()
    assert 'specdeploy_addon_faults_total{pool="p",where="metrics"} 3.0' in text


def test_an_install_callback_failure_is_reported_and_the_watcher_keeps_watching(
    tmp_path: Path,
) -> None:
    table = tmp_path / "table.json"
    table.write_text("{}")
    errors: list[str] = []
    installed: list[Any] = []
    fail = [True]

    def on_table(t: Any) -> None:
        if fail[0]:
            raise RuntimeError("install bug")
        installed.append(t)

    def load(t: bytes, p: bytes | None) -> LoadedTable:
        return LoadedTable("off", None, (), "", t.decode())

    w = TableWatcher(table, None, load, on_table, errors.append, 60)
    assert w.check() is False
    assert errors and "install bug" in errors[0]
    fail[0] = False
    table.write_text('{"x": 1}')
    assert w.check() is True and len(installed) == 1
