"""The chaos matrix's pure parts: the proxy's rule matching and the invariants I1-I7."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from e2e.chaos import invariants as inv
from e2e.chaos.proxy import WRITE_METHODS, Action, Match, Rule, is_watch
from e2e.chaos.scenarios import serving_reconcile_writes

Obj = dict[str, Any]


def _obj(
    name: str, *, labels: dict[str, str] | None = None, owners: Sequence[str] = (), **meta: Any
) -> Obj:
    refs = [{"kind": "SpeculativeDeployment", "uid": u, "name": "p"} for u in owners]
    return {"metadata": {"name": name, "labels": labels or {}, "ownerReferences": refs, **meta}}


def test_a_rule_with_nth_fires_on_that_matching_request_only() -> None:
    rule = Rule(Action.RESET, Match(WRITE_METHODS, "/namespaces/a/"), nth=2)

    fired = [
        rule.consider(m, p)
        for m, p in [
            ("GET", "/api/v1/namespaces/a/pods"),
            ("POST", "/api/v1/namespaces/a/x"),
            ("POST", "/api/v1/namespaces/b/x"),
            ("PATCH", "/api/v1/namespaces/a/y"),
            ("POST", "/api/v1/namespaces/a/z"),
        ]
    ]

    assert fired == [False, False, False, True, False]
    assert rule.fired_on == ["PATCH /api/v1/namespaces/a/y"]


def test_an_armed_rule_counts_from_the_request_that_arms_it() -> None:
    rule = Rule(
        Action.KILL_AFTER_FORWARD, Match(WRITE_METHODS), nth=1, arm=Match("PATCH", "/configmaps/")
    )

    assert not rule.consider("POST", "/api/v1/namespaces/a/events")
    assert rule.consider("PATCH", "/api/v1/namespaces/a/configmaps/t")


def test_every_fires_on_a_fixed_fraction_and_times_bounds_the_firings() -> None:
    every = Rule(Action.TRUNCATE, every=5)
    once = Rule(Action.STATUS, times=1)

    assert sum(every.consider("GET", "/x") for _ in range(20)) == 4
    assert [once.consider("GET", "/x") for _ in range(3)] == [True, False, False]


def test_watch_requests_are_told_apart_by_their_query() -> None:
    assert is_watch("/api/v1/pods?watch=true&resourceVersion=3")
    assert not is_watch("/api/v1/pods?watchers=true")
    assert not Match(watch=True)("GET", "/api/v1/pods")


def test_nth_counts_from_one() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        Rule(Action.RESET, nth=0)


def test_a_missing_wanted_child_is_lost() -> None:
    check = inv.lost({("Job", "j"), ("Service", "s")}, {("Service", "s")})

    assert (check.ok, check.value, check.detail) == (False, 1, "Job/j")


def test_two_jobs_for_one_profile_are_a_duplicate_but_one_being_deleted_is_not() -> None:
    label = {"specdeploy.io/profile": "p-1"}
    two = {"Job": [_obj("a", labels=label), _obj("b", labels=label)]}
    going = {"Job": [_obj("a", labels=label), _obj("b", labels=label, deletionTimestamp="t")]}

    assert not inv.duplicates(two).ok
    assert inv.duplicates(going).ok


def test_an_object_whose_owners_are_all_gone_is_an_orphan() -> None:
    found = {"ConfigMap": [_obj("kept", owners=["u1"]), _obj("orphan", owners=["u9"])]}

    check = inv.orphans(found, ["u1"])

    assert (check.ok, check.detail) == (False, "ConfigMap/orphan")


def test_convergence_beyond_the_bound_or_never_fails() -> None:
    assert inv.convergence(12.0).ok
    assert not inv.convergence(61.0, bound=60.0).ok
    assert not inv.convergence(None, why="phase Profiling").ok


def test_any_write_in_the_steady_window_fails() -> None:
    assert inv.steady([], 20).ok
    assert not inv.steady(["patch configmaps"], 20).ok


def _serving(uid: str, generation: int) -> Obj:
    return _obj("d", labels={"specdeploy.io/component": "serving"}, uid=uid, generation=generation)


def test_collateral_holds_a_deployment_to_its_intended_generation_delta() -> None:
    before = inv.snapshot([_serving("u", 3)], [])
    bumped = inv.snapshot([_serving("u", 4)], [])
    recreated = inv.snapshot([_serving("v", 1)], [])

    assert not inv.collateral(before, bumped, inv.Intent()).ok
    assert inv.collateral(before, bumped, inv.Intent(deployment_generation=(0, 1))).ok
    assert not inv.collateral(before, recreated, inv.Intent()).ok
    assert inv.collateral(before, recreated, inv.Intent(deployment_uid_kept=False)).ok


def test_a_replaced_job_fails_when_its_uid_must_be_kept() -> None:
    before = inv.snapshot([], [{"metadata": {"name": "j", "uid": "1"}}])
    after = inv.snapshot([], [{"metadata": {"name": "j", "uid": "2"}}])

    assert not inv.collateral(before, after, inv.Intent(job_uid_kept=True)).ok
    assert inv.collateral(before, after, inv.Intent()).ok


def test_swallowed_exceptions_in_the_operator_log_fail() -> None:
    quiet = "INFO specdeploy.operator: a/b: reconciled, 0 request(s), phase Ready\n"
    loud = quiet + "ERROR kopf.objects: Handler 'x' failed with an exception. Will ignore it.\n"

    assert inv.swallowed(quiet).ok
    assert not inv.swallowed(loud.replace("Will ignore", "will ignore")).ok


def test_the_serving_reconcile_is_the_one_that_applies_the_table() -> None:
    log = "\n".join(
        [
            "x INFO specdeploy.operator: ns/llama-8b-chat: status of llama-8b-chat: Profiling",
            "x DEBUG specdeploy.operator: ns/llama-8b-chat: reconciled, 1 request(s), phase P",
            "x INFO specdeploy.operator: ns/llama-8b-chat: apply ConfigMap t",
            "x INFO specdeploy.operator: ns/llama-8b-chat: apply Deployment d",
            "x INFO specdeploy.operator: ns/llama-8b-chat: event Ready",
            "x INFO specdeploy.operator: ns/llama-8b-chat: event NothingToObserve",
            "x DEBUG specdeploy.operator: ns/llama-8b-chat: reconciled, 4 request(s), phase R",
        ]
    )

    # Events are counted apart: how many a reconcile sends depends on timing.
    assert serving_reconcile_writes(log, "ns") == (2, 2)


def test_an_operator_exit_passes_only_when_it_gave_up_its_lease_by_design() -> None:
    from e2e.chaos.scenarios import _operator_exit

    lost = "CRITICAL leader election: could not renew within 10s; exiting with status 75"
    assert _operator_exit(f"...\n{lost}\n").ok
    assert not _operator_exit("Traceback (most recent call last):\n  ...\nKeyError: 'x'").ok
