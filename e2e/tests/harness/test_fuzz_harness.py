"""The fuzzer's pure parts: its oracle, its generator's promises, and the saved cases.

The oracle is what the cluster test trusts, so each check is shown to fire on
the case it exists for; the generator must replay (one seed, one list) and
hold every pod back; each saved regression, run through ``validate()``,
gets the verdict its fixture expects (the operator's re-check of objects
stored before a CRD change).
"""

from __future__ import annotations

import pytest

from e2e.fuzz import landing, oracle, replay
from e2e.fuzz.generate import generate
from e2e.fuzz.strategies import HOLD
from specdeploy.operator.decision.validation import validate
from specdeploy.runtime.profile import Fingerprint

SENT = {"spec": {"model": {"name": "m"}, "pools": [{"gpuType": "A"}], "vllm": {"extraArgs": []}}}


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ("spec.pools[0].gpuType: A is already spec.pools[1]", "spec.pools[0].gpuType"),
        ("spec.nodeSelector[k]: 'v' is not a valid label value", "spec.nodeSelector[k]"),
        ("something broke", None),
        ("spec: must be an object", None),
    ],
)
def test_the_field_a_validation_message_names_is_read_from_its_start(
    message: str, path: str | None
) -> None:
    assert oracle.named_field(message) == path


@pytest.mark.parametrize(
    ("path", "exists"),
    [
        ("spec.model.name", True),
        ("spec.model.tokenSecretRef", True),  # a missing field whose parent is there
        ("spec.pools[0].gpuType", True),
        ("spec.pools[3].gpuType", False),
        ("spec.speculation.draftModel", False),
        ("spec.vllm.extraArgs[0]", False),
    ],
)
def test_a_named_field_must_be_in_the_spec_sent(path: str, exists: bool) -> None:
    assert oracle.field_exists(path, SENT) is exists


def test_a_valid_false_message_naming_no_field_of_the_spec_is_a_violation() -> None:
    def body(message: str) -> dict[str, object]:
        condition = {"type": "Valid", "status": "False", "message": message}
        return {"status": {"conditions": [condition]}}

    assert oracle.check_valid_false(body("spec.model.name: bad"), SENT) == []
    assert oracle.check_valid_false(body("it is bad"), SENT)
    assert oracle.check_valid_false(body("spec.pools[7].gpuType: bad"), SENT)


def test_children_are_attributed_by_owner_uid_and_long_names_are_caught() -> None:
    mine = {"kind": "Job", "metadata": {"name": "j" * 64, "ownerReferences": [{"uid": "u1"}]}}
    other = {"kind": "Service", "metadata": {"name": "s", "ownerReferences": [{"uid": "u2"}]}}
    assert oracle.owned_by("u1", [mine, other]) == ["Job/" + "j" * 64]
    assert oracle.long_names([mine, other]) == [f"Job/{'j' * 64} is 64 characters"]


def test_only_refusals_that_stuck_count_and_guarded_patch_races_do_not() -> None:
    writes = [
        ("patch deployments", "d", 422),
        ("patch deployments", "d", 422),
        ("patch configmaps", "c", 400),
        ("patch configmaps", "c", 200),  # cured: not a violation
        ("patch serviceaccounts", "sa", 422),  # a failed resourceVersion test: a race
        ("create jobs", "j", 409),
    ]
    assert oracle.refused_writes(writes) == ["patch deployments d -> 422 (2x)"]


def test_the_operator_log_alarms_on_tracebacks_and_dropped_work() -> None:
    text = "ok line\nTraceback (most recent call last):\nns/x: reconcile raised; retrying\n"
    assert len(oracle.log_alarms(text)) == 2


def test_one_seed_gives_one_list_and_every_spec_holds_its_pods_back() -> None:
    first, again = generate(12, seed_value=3), generate(12, seed_value=3)
    assert first == again
    assert len({b["metadata"]["name"] for b in first}) == 12
    assert all(b["spec"]["nodeSelector"][HOLD[0]] == HOLD[1] for b in first)
    assert all(len(b["metadata"]["name"]) <= 253 for b in first)


def test_a_mismatched_landed_profile_names_another_fingerprint() -> None:
    fingerprint = Fingerprint(model="m", method="ngram", gpu_type="G", max_k=3)
    for which in range(len(landing.MISMATCHES)):
        doc = landing.profile_document(
            fingerprint.profile_name(), "ns", landing.mismatched(fingerprint, which)
        )
        assert landing.fingerprint_of_profile(doc) != fingerprint.profile_name()


@pytest.mark.parametrize("case", replay.load_all(), ids=lambda c: c.name)
def test_a_saved_case_gets_the_verdict_its_fixture_expects_from_validate(
    case: replay.Regression,
) -> None:
    verdict = validate(case.body["spec"])
    if case.outcome == "valid":
        assert verdict.valid, verdict.problems
    else:
        assert not verdict.valid
        assert any(p.message.startswith(str(case.field)) for p in verdict.problems)


def test_the_retry_peak_is_the_fastest_retried_refusal() -> None:
    writes = [("ns/d", "patch deployments", float(t), 400) for t in (0, 1, 2, 3)]
    writes += [("ns/c", "patch configmaps", float(t), 422) for t in (0, 30, 60)]
    writes += [("ns/s", "patch services", float(t), 200) for t in (0, 0.1, 0.2)]
    peak = oracle.retry_peak(writes)
    assert peak == {"object": "patch deployments ns/d", "refusals": 4, "perMinute": 60.0}
