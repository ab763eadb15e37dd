"""A profile stands only for the fingerprint it names (review M12, inverted probe)."""

from __future__ import annotations

from specdeploy.operator.decision.decide import decide
from tests.unit.operator.test_operator_reconcile import (
    H100,
    NOW,
    deployment,
    node,
    observed,
    pool_status,
    profile,
)


def test_a_profile_whose_fingerprint_names_another_profile_is_not_served() -> None:
    body = deployment({"pools": [{"gpuType": H100}]})
    doc = profile(body, H100)
    doc["spec"]["fingerprint"]["gpuType"] = "NVIDIA-L4"
    doc["spec"]["fingerprint"]["model"] = "some/other-model"
    decision = decide(body, observed(profiles=(doc,), nodes=(node("h1", H100),)), now=NOW)
    pool = pool_status(decision, H100)
    assert pool["state"] == "Failed"
    assert "holds the fingerprint of" in pool["message"]
    assert not any(m["kind"] == "Deployment" for m in decision.owned)


def test_the_profiling_job_tells_the_profiler_the_fingerprint_it_names_the_profile_by() -> None:
    import json

    from specdeploy.runtime.profile import Fingerprint

    body = deployment({"pools": [{"gpuType": H100}]})
    decision = decide(body, observed(nodes=(node("h1", H100),)), now=NOW)
    job = next(m for m in decision.shared if m["kind"] == "Job")
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    fp = Fingerprint.model_validate(json.loads(env["SPECDEPLOY_PROFILE_FINGERPRINT"]))
    assert fp.profile_name() == env["SPECDEPLOY_PROFILE_NAME"]
