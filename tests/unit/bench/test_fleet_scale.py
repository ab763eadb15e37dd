"""The fleet benchmark's pure parts: the seeded mix, and the parsers of its figures."""

from __future__ import annotations

import json
from collections import Counter

from e2e.fleet_scale import measure, mix
from e2e.localcluster import fleet


def test_fleet_spec_has_all_six_types_and_the_asked_node_count() -> None:
    pools = fleet.parse_fleet(mix.fleet_spec(2000))
    assert {p.key for p in pools} == set(fleet.CATALOG)
    assert sum(p.nodes for p in pools) == 2000


def test_plan_is_seeded_and_a_prefix_of_a_longer_one() -> None:
    short, long = mix.plan(100, 50), mix.plan(500, 50)
    assert [p.body for p in short] == [p.body for p in long[:100]]
    assert {p.kind for p in long} == {"shared", "explicit", "discovery", "fixed"}


def test_shared_deployments_need_one_profile_and_fixed_ones_none() -> None:
    planned = mix.plan(500, 50)
    shared = [p for p in planned if p.kind == "shared"]
    assert len(shared) > 50
    assert mix.expected_jobs(shared) == 1
    assert mix.expected_jobs([p for p in planned if p.kind == "fixed"]) == 0
    assert mix.expected_jobs(planned) < len(planned)


def _event(
    verb: str,
    at: str,
    resource: str = "deployments",
    user: str = "op",
    stage: str = "ResponseComplete",
) -> str:
    return json.dumps(
        {
            "verb": verb,
            "stage": stage,
            "stageTimestamp": at,
            "user": {"username": user},
            "auditID": f"{verb}{at}{resource}",
            "objectRef": dict(
                zip(("resource", "subresource"), resource.split("/", 1), strict=False)
            ),
        }
    )


def test_requests_in_window_counts_the_users_requests_by_verb_and_resource() -> None:
    lines = [
        _event("get", "2026-01-01T00:00:10Z"),
        _event("patch", "2026-01-01T00:00:20Z"),
        _event("update", "2026-01-01T00:00:21Z", resource="leases"),
        _event("create", "2026-01-01T00:00:22Z", resource="events"),
        _event("get", "2026-01-01T00:00:20Z", user="other"),
        _event("list", "2026-01-01T00:05:00Z"),
        _event("watch", "2026-01-01T00:00:30Z", stage="ResponseStarted"),
        _event("watch", "2026-01-01T00:00:30Z", stage="ResponseComplete"),
        "not json",
    ]
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    counts = measure.requests_in_window(lines, "op", start, start + 60)
    assert counts == Counter(
        {
            ("get", "deployments"): 1,
            ("patch", "deployments"): 1,
            ("update", "leases"): 1,
            ("create", "events"): 1,
            ("watch", "deployments"): 1,
        }
    )
    assert measure.by_verb(counts) == Counter(
        {"get": 1, "patch": 1, "update": 1, "create": 1, "watch": 1}
    )
    assert measure.writes(counts) == 3
    assert measure.writes(counts, housekeeping=False) == 1


def test_a_subresource_is_counted_under_its_resource() -> None:
    line = _event("patch", "2026-01-01T00:00:10Z", resource="speculativedeployments/status")
    counts = measure.requests_in_window([line], "op", 1767225600.0, 1767225660.0)
    assert counts == Counter({("patch", "speculativedeployments/status"): 1})


def test_proc_and_metric_parsers() -> None:
    stat = "42 (python3 -m x) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0"
    assert measure.cpu_seconds(stat, 100) == 2.0
    assert measure.rss_mib("VmHWM:\t 2048 kB\nVmRSS:\t 1024 kB\n") == 1.0
    text = 'a_total{x="1"} 2.0\na_total{x="2"} 3.0\na_total_created 9\n# HELP a_total\n'
    assert measure.metric_sum(text, "a_total") == 5.0
