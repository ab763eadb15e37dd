"""A profile's live status is written when its estimate moves, never for nothing.

Found on the local cluster (``bench/loop_shift.py``): with no traffic at all,
every interval patched each profile's status, because a view holding
``costRatio: null`` turned into a merge patch that deleted an absent key,
every time.
"""

from __future__ import annotations

from typing import Any

from specdeploy.operator.manifests import merge_patch
from specdeploy.operator.telemetry.profile_live import status_patch, view_moved

NOW, LATER = "2026-12-01T00:00:00Z", "2026-12-01T00:00:10Z"


def view(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sources": ["chat/NVIDIA-L40S"],
        "sequenceSteps": 1000,
        "reached": [1000, 800],
        "accepted": [800, 600],
        "perPosition": [0.8, 0.75],
        "costRatio": None,
        "costDrift": [],
    }
    return {**base, **changes}


def applied(body: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    """``body`` after the API server applied a merge patch to it."""

    def merge(old: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:  # RFC 7386
        out = dict(old)
        for key, value in p.items():
            if value is None:
                out.pop(key, None)
            elif isinstance(value, dict):
                prior = out.get(key)
                out[key] = merge(prior if isinstance(prior, dict) else {}, value)
            else:
                out[key] = value
        return out

    return merge(body, patch or {})


def test_a_null_for_an_absent_key_is_no_patch() -> None:
    assert merge_patch({"a": 1}, {"a": 1, "b": None}) == {}
    assert merge_patch({"a": 1, "b": 2}, {"a": 1, "b": None}) == {"b": None}


def test_the_same_view_twice_writes_once() -> None:
    profile: dict[str, Any] = {"metadata": {"generation": 1}, "status": {}}
    first = status_patch(profile, view(), now=NOW, tolerance=0.02)
    assert first is not None
    profile = applied(profile, {"status": first})
    assert status_patch(profile, view(), now=LATER, tolerance=0.02) is None


def test_counts_that_only_grew_are_no_write_but_a_moved_estimate_is() -> None:
    profile = applied({"metadata": {"generation": 1}, "status": {}}, {})
    profile = applied(profile, {"status": status_patch(profile, view(), now=NOW, tolerance=0.02)})
    grown = view(sequenceSteps=5000, reached=[5000, 4000], accepted=[4050, 3010])
    assert status_patch(profile, grown, now=LATER, tolerance=0.02) is None
    moved = view(perPosition=[0.1, 0.75])
    patch = status_patch(profile, moved, now=LATER, tolerance=0.02)
    assert patch is not None and patch["live"]["perPosition"] == [0.1, 0.75]


def test_a_new_source_or_drift_is_a_move() -> None:
    old = view()
    assert view_moved(old, view(sources=["a", "b"]), 0.02)
    assert view_moved(old, view(costDrift=["chat/NVIDIA-L40S"]), 0.02)
    assert view_moved(old, view(costRatio=1.2), 0.02)
    assert not view_moved(old, view(perPosition=[0.81, 0.74]), 0.02)
    assert view_moved(None, old, 0.02)


def test_a_move_inside_the_new_estimates_interval_is_noise() -> None:
    old = view()
    assert not view_moved(old, view(perPosition=[0.8, 0.70], halfWidth=[0.01, 0.1]), 0.02)
    assert view_moved(old, view(perPosition=[0.8, 0.70], halfWidth=[0.01, 0.01]), 0.02)
