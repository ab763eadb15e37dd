"""The demo's status table and build estimate: pure parts of ``make demo``."""

from __future__ import annotations

from typing import Any

from e2e.demo import builds, table

H100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"


def sdep(*pools: dict[str, Any], phase: str = "Ready") -> dict[str, Any]:
    return {"metadata": {"name": "chat"}, "status": {"phase": phase, "pools": list(pools)}}


def pool(gpu: str, **fields: Any) -> dict[str, Any]:
    return {"gpuType": gpu, "state": "Ready", "replicas": 1, "readyReplicas": 1, **fields}


def test_a_pools_row_joins_its_status_with_prometheus_by_its_pool_label() -> None:
    body = sdep(
        pool(H100, schedule="1-16:5 17-256:3", live={"schedule": "1-8:4 9-256:2"}),
        pool(L40S, schedule="1-256:2"),
    )
    samples = {
        "k": {"NVIDIA-H100-80GB-HBM3": 4.0},
        "acceptance": {"NVIDIA-H100-80GB-HBM3": 0.612, "NVIDIA-L40S": 0.5},
        "tokens": {"NVIDIA-L40S": 812.4},
    }
    h100, l40s = table.pool_rows(body, samples)
    assert (h100.gpu, h100.k, h100.acceptance, h100.tokens_per_s) == (H100, 4.0, 0.612, None)
    assert h100.table == "1-8:4 9-256:2", "the live table in force wins over the profile's"
    assert (l40s.table, l40s.tokens_per_s, l40s.ready) == ("1-256:2", 812.4, "1/1")


def test_the_table_is_aligned_under_its_header_and_unknowns_show_as_a_dash() -> None:
    rows = table.pool_rows(sdep(pool(H100), pool(L40S, state="Profiling")), {})
    lines = table.render(rows).splitlines()
    assert lines[0].split() == list(table.COLUMNS)
    assert len(lines) == 3
    state_at = lines[0].index("STATE")
    assert [line[state_at:].split()[0] for line in lines[1:]] == ["Ready", "Profiling"]
    assert lines[1].split()[5:] == ["-", "-", "-", "-", "-"]


def test_a_deployment_without_pools_yet_still_shows_its_phase() -> None:
    (row,) = table.pool_rows({"metadata": {"name": "chat"}}, {})
    assert (row.name, row.phase, row.gpu) == ("chat", "Pending", "-")


def test_an_instant_vector_becomes_values_by_pool_without_nan() -> None:
    series = [
        {"metric": {"specdeploy_pool": "a"}, "value": [0, "1.5"]},
        {"metric": {"specdeploy_pool": "b"}, "value": [0, "NaN"]},
        {"metric": {}, "value": [0, "3"]},
    ]
    assert table.by_pool(series) == {"a": 1.5}


def test_the_build_estimate_names_what_is_missing_and_its_minutes() -> None:
    assert builds.missing_units(["kubectl", "kube-apiserver", "helm"]) == ["k8s", "helm"]
    line = builds.estimate_line(["k8s", "helm"])
    assert "k8s, helm" in line and "about 22 min" in line
    assert "all cached" in builds.estimate_line([])
    assert "3 min so far of about 22" in builds.progress_line(180, ["k8s", "helm"])


def test_live_numbers_alone_do_not_change_the_tables_shape_but_k_and_the_table_do() -> None:
    body = sdep(pool(H100, schedule="1-256:3"))
    key = "NVIDIA-H100-80GB-HBM3"
    base = table.shape(table.pool_rows(body, {"k": {key: 3.0}, "tokens": {key: 100.0}}))
    busier = table.shape(table.pool_rows(body, {"k": {key: 3.0}, "tokens": {key: 900.0}}))
    assert busier == base
    assert table.shape(table.pool_rows(body, {"k": {key: 1.0}})) != base
    retabled = sdep(pool(H100, schedule="1-256:1"))
    assert table.shape(table.pool_rows(retabled, {"k": {key: 3.0}})) != base
