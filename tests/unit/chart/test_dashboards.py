"""The generated dashboards: current, well formed, and reading only series that exist."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from e2e.emulated.vllm_metrics import VllmMetrics
from specdeploy.chart import dashboards
from specdeploy.operator.reactor.metrics import OperatorMetrics
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics

Obj = dict[str, Any]
BOARDS = {
    rel: json.loads(text) for rel, text in sorted(dashboards.files().items())
}  # built once: the builders are pure
_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def data_panels(board: Obj) -> list[Obj]:
    return [p for p in board["panels"] if p["type"] != "row"]


def exprs(board: Obj) -> list[str]:
    return [t["expr"] for p in data_panels(board) for t in p["targets"]]


def failed_profiling(name: str, gpu_type: str) -> Obj:
    """A deployment whose Profiled condition names one failed pool."""
    condition = {"type": "Profiled", "status": "False", "reason": "ProfilingFailed",
                 "message": f"{gpu_type}: the Job failed"}  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "status": {"conditions": [condition], "pools": [{"gpuType": gpu_type, "state": "Failed"}]},
    }


def exported_names() -> set[str]:
    """Every series name the add-on, the operator and vLLM export (plus Prometheus's ``up``),
    read from the real metric objects after one step: no error has happened yet."""
    addon = AddonMetrics("NVIDIA-L40S", max_k=3)
    record = StepRecord(4, 2, 0.02, (4, 3), (4, 3), (3, 2), decode_sequences=4, verified_tokens=12)
    addon.step(2, record)
    addon.table_installed(1, "adaptive", "p-1", "abc")
    addon.goodput(100.0)
    addon.gain_over_vanilla(1.5)
    addon.profile_acceptance((0.8, 0.6))
    operator = OperatorMetrics()
    judged = failed_profiling("judged", "NVIDIA-H100")
    judged["status"]["pools"][0]["floor"] = {"state": "plain", "ratio": 1.1}
    operator.known([failed_profiling("chat", "NVIDIA-L40S"), judged])
    vllm = VllmMetrics("llama", max_model_len=2048, num_spec_tokens=3)
    names = {"up"}
    for registry in (addon.registry, operator.registry, vllm.registry):
        for family in registry.collect():
            names.update(s.name for s in family.samples)
    return names


def test_files_are_the_two_boards_under_the_chart() -> None:
    assert set(BOARDS) == {"dashboards/specdeploy-fleet.json", "dashboards/specdeploy-pool.json"}
    assert {b["uid"] for b in BOARDS.values()} == {"specdeploy-fleet", "specdeploy-pool"}
    assert all(b["schemaVersion"] == 41 for b in BOARDS.values())  # Grafana 12's


@pytest.mark.parametrize("rel", sorted(BOARDS))
def test_panel_ids_are_unique_and_no_two_panels_overlap(rel: str) -> None:
    panels = BOARDS[rel]["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize("rel", sorted(BOARDS))
def test_every_panel_reads_the_datasource_variable_has_a_unit_and_distinct_ref_ids(
    rel: str,
) -> None:
    for p in data_panels(BOARDS[rel]):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["fieldConfig"]["defaults"].get("unit"), p["title"]
        assert p.get("description"), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]


@pytest.mark.parametrize(
    ("rel", "multi"),
    [("dashboards/specdeploy-fleet.json", True), ("dashboards/specdeploy-pool.json", False)],
    ids=["fleet-multi", "pool-single"],
)
def test_variables_chain_namespace_deployment_pool_from_label_values(rel: str, multi: bool) -> None:
    variables = {v["name"]: v for v in BOARDS[rel]["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "deployment", "pool"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["deployment"]["query"] == (
        'label_values(specdeploy_steps_total{namespace=~"$namespace"}, specdeploy_deployment)'
    )
    assert '$deployment"}, specdeploy_pool)' in variables["pool"]["query"]
    assert all(variables[n]["multi"] is multi for n in ("namespace", "deployment", "pool"))


def test_every_metric_a_panel_names_is_exported_by_the_addon_the_operator_or_vllm() -> None:
    known = exported_names()
    used = {m for board in BOARDS.values() for e in exprs(board) for m in _METRIC.findall(e)}
    assert used, "no metric found: the pattern is wrong"
    assert not used - known, f"not exported by anything: {sorted(used - known)}"


def test_the_error_counters_exist_before_any_error() -> None:
    """A panel or alert on increase() sees the first error only if the series was there."""
    addon = AddonMetrics("NVIDIA-L40S", max_k=3)
    for name in ("specdeploy_table_reload_errors_total", "specdeploy_policy_errors_total"):
        assert addon.registry.get_sample_value(name, {"pool": "NVIDIA-L40S"}) == 0.0


def test_pool_queries_filter_on_all_three_variables_and_operator_queries_on_its_job() -> None:
    for board in BOARDS.values():
        for e in exprs(board):
            if "specdeploy_operator_profiling_failed" in e:
                for var in ("$namespace", "$deployment", "$pool"):
                    assert var in e, f"{e} ignores {var}"
            if "specdeploy_operator_" in e:
                assert 'job="specdeploy-operator"' in e, e
            else:
                for var in ("$namespace", "$deployment", "$pool"):
                    assert var in e, f"{e} ignores {var}"


def test_the_pool_board_has_every_panel_the_issue_asks_for() -> None:
    titles = " | ".join(p["title"] for p in data_panels(BOARDS["dashboards/specdeploy-pool.json"]))
    wanted_titles = (
        *("K chosen over time", "K distribution", "acceptance per position", "Drafting rate"),
        *("Acceptance length", "Step time by K", "Verified tokens", "predicted against observed"),
        *("speedup over plain decoding", "Batch-size distribution", "Table generation"),
        *("reload", "Profile", "profiling failed", "Request rate", "latency", "Replicas"),
    )
    for wanted in wanted_titles:
        assert wanted.lower() in titles.lower(), wanted
