"""The demo's status table and build estimate: pure parts of ``make demo``."""

from __future__ import annotations

import datetime
from typing import Any

from e2e.demo import builds, phases, table

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
    assert lines[1].split()[5:] == ["-"] * 7


def test_the_live_floors_state_and_r_show_which_pools_run_plain_decoding() -> None:
    body = sdep(
        pool(H100, floor={"state": "plain", "ratio": 0.912, "ratioLow": 0.88, "ratioHigh": 0.94}),
        pool(L40S, floor={"state": "speculating", "ratio": 1.31}),
        pool("NVIDIA-A100-SXM4-80GB"),
    )
    plain, speculating, unjudged = table.pool_rows(body, {})
    assert (plain.decoding, plain.ratio) == ("plain+canary", "0.91 [0.88,0.94]")
    assert (speculating.decoding, speculating.ratio) == ("speculating", "1.31")
    assert (unjudged.decoding, unjudged.ratio) == ("-", "-")
    judged_again = sdep(pool(H100, floor={"state": "plain", "ratio": 0.95}))
    flipped = sdep(pool(H100, floor={"state": "speculating", "ratio": 0.95}))
    assert table.shape(table.pool_rows(judged_again, {})) == table.shape([plain])
    assert table.shape(table.pool_rows(flipped, {})) != table.shape([plain])
    measuring = sdep(pool(H100, floor={"state": "speculating", "referenceSince": "2026-01-01"}))
    (row,) = table.pool_rows(measuring, {})
    assert row.decoding == "spec+reference"


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


def test_a_phase_waiting_for_plain_decoding_needs_every_pool_rolled_out_in_that_state() -> None:
    plain = {"state": "plain", "since": "2026-12-06T10:00:40Z", "ratio": 1.2}
    rolling = sdep(pool(H100, floor=plain), pool(L40S, state="RollingOut", floor=plain))
    done = sdep(pool(H100, floor=plain), pool(L40S, floor={**plain, "ratioLow": 1.1}))
    assert not phases.reached(phases.pools_now(rolling), "plain")
    assert phases.reached(phases.pools_now(done), "plain")
    assert not phases.reached(phases.pools_now(done), "speculating")
    assert not phases.reached([], "plain")


def test_a_verdict_says_when_the_floor_decided_and_when_the_pool_served_so() -> None:
    floor = {
        "state": "plain",
        "since": "2026-12-06T10:00:40Z",
        "ratio": 0.91,
        "ratioLow": 0.88,
        "ratioHigh": 0.94,
        "canaryAt": "2026-12-06T10:00:50Z",
    }
    body = sdep(pool(H100, floor=floor), pool(L40S, floor={"state": "speculating"}))
    started = datetime.datetime(2026, 12, 6, 10, 0, 5, tzinfo=datetime.UTC)
    random = phases.Phase("random", 30, until="plain", cap_seconds=240)
    h100, l40s = phases.verdicts(phases.pools_now(body), random, started, {H100: 44.0}, 10)
    assert (h100.reached, h100.decided_s, h100.serving_s, h100.ratio) == (
        True,
        35.0,
        44.0,
        (0.91, 0.88, 0.94),
    )
    assert "decided at 35 s (3.5 telemetry windows)" in h100.line()
    assert "canary's R 0.910 [0.880, 0.940]" in h100.line()
    assert (l40s.reached, l40s.decided_s, l40s.ratio) == (False, None, None)
    assert l40s.line().startswith(f"{L40S}: speculating at the phase's end, R - (the floor")
    back = phases.Phase("chat", 30, until="speculating", cap_seconds=120)
    (stayed,) = phases.verdicts(phases.pools_now(sdep(pool(L40S, floor={
        "state": "speculating", "since": "2026-12-06T09:00:00Z", "ratio": 2.5,
        "ratioLow": 2.3, "ratioHigh": 2.7,
    }))), back, started, {L40S: 0.0}, 10)  # fmt: skip
    assert stayed.line() == f"{L40S}: speculating throughout, R 2.500 [2.300, 2.700]"
    record = phases.as_json(random, [h100, l40s])
    assert [p["reached"] for p in record["pools"]] == [True, False]
