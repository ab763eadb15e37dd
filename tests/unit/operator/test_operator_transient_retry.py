"""A profiling Job that failed for a transient reason is tried again (review M7, inverted).

At 7a48b4a a Job whose deadline passed while its pod waited for a node, or
whose profiler exited 1 ``backoffLimit`` times, was kept failed for good: the
pool was Failed until someone deleted the Job by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan_children
from specdeploy.operator.naming import job_name
from specdeploy.operator.pool.jobs import TRANSIENT_ATTEMPTS
from tests.unit.operator.test_operator_reconcile import (
    H100,
    NOW,
    converged,
    deployment,
    expected_profile,
    node,
    observed,
    pool_status,
)


def failed(job: Mapping[str, Any], reason: str) -> dict[str, Any]:
    failed_job = dict(job)
    failed_job["status"] = {
        "failed": 1,
        "conditions": [{"type": "Failed", "status": "True", "reason": reason}],
    }
    return failed_job


def test_a_deadline_while_pending_is_retried_as_a_new_job_then_failed_after_the_attempts() -> None:
    body = deployment()
    world, _ = converged(body, observed(nodes=(node("h1", H100),)))
    profile = expected_profile(body, H100)
    others = [
        o
        for k in world.children.values()
        for o in k.values()
        if not o["metadata"]["name"].startswith("profile-")
    ]
    first = world.children["Job"][job_name(profile)]
    jobs = [failed(first, "DeadlineExceeded")]
    for attempt in range(2, TRANSIENT_ATTEMPTS + 1):
        state = observed(*others, *jobs, nodes=tuple(world.nodes))
        decision = decide(body, state, now=NOW)
        wanted = job_name(profile, f"/attempt-{attempt}")
        creates = [r for r in plan_children(body, decision, state) if r.method == "POST"]
        assert any(wanted in str(r.body) for r in creates), (attempt, creates)
        pool = pool_status(decision, H100)
        assert pool["state"] == "Profiling"
        assert f"attempt {attempt} of {TRANSIENT_ATTEMPTS}" in pool["message"]
        made = next(m for m in decision.shared if m["metadata"]["name"] == wanted)
        jobs.append(
            failed(
                {**made, "metadata": {**made["metadata"], "uid": f"u{attempt}"}},
                "BackoffLimitExceeded",
            )
        )
    final = decide(body, observed(*others, *jobs, nodes=tuple(world.nodes)), now=NOW)
    assert pool_status(final, H100)["state"] == "Failed"


def _job_active() -> dict[str, Any]:
    return {"metadata": {"name": "profile-x"}, "status": {"active": 1}}


def _pod(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"creationTimestamp": "2026-12-01T00:00:00Z"}, "status": status}


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
            "not scheduled (Unschedulable): 0/6 nodes are available",
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "profiler",
                        "state": {
                            "waiting": {"reason": "ImagePullBackOff", "message": "pull denied"}
                        },
                    }
                ],
            },
            "waiting (ImagePullBackOff): pull denied",
        ),
    ],
    ids=["unschedulable", "image-pull"],
)
def test_a_pending_profiler_pod_is_shown_as_what_holds_it_not_as_running(
    status: dict[str, Any], shown: str
) -> None:
    """Review M7: the Job counts a Pending pod as active, and the status said "running"
    for the two hours of the deadline."""
    from specdeploy.operator.observed import job_state

    state = job_state(_job_active(), [_pod(status)])
    assert shown in state.message
    assert "running" not in state.message


def test_a_running_profiler_pod_is_still_shown_as_running() -> None:
    from specdeploy.operator.observed import job_state

    assert (
        "1 profiler pod(s) running"
        in job_state(_job_active(), [_pod({"phase": "Running"})]).message
    )
