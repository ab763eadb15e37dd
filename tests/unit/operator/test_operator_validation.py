"""Validation of a SpeculativeDeployment spec: every problem names its field and its check."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from specdeploy.operator.decision.validation import PREDICATES, reason_of, validate
from tests.paths import EXAMPLES

EXAMPLE = EXAMPLES / "specdeploy.yaml"


def example_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    return spec


def with_change(path: str, value: Any) -> dict[str, Any]:
    """The example spec with one field set (``a.b.0.c``), or removed when value is DELETE."""
    spec = copy.deepcopy(example_spec())
    *parents, last = path.split(".")
    node: Any = spec
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return spec


DELETE = object()

# (id, field path, value, expected reason, text the message must contain)
BAD = [
    ("fixedK above maxK", "speculation.fixedK", 6, "FixedKExceedsMaxK", "spec.speculation.fixedK"),
    (
        "fixed policy without fixedK",
        "speculation.policy",
        "fixed",
        "FixedKMissing",
        "spec.speculation.fixedK",
    ),
    (
        "eagle3 without a draft model",
        "speculation.draftModel",
        DELETE,
        "DraftModelMissing",
        "spec.speculation.draftModel",
    ),
    (
        "ngram with a draft model",
        "speculation.method",
        "ngram",
        "DraftModelUnused",
        "spec.speculation.draftModel",
    ),
    (
        "min replicas above max",
        "poolDefaults.replicas",
        {"min": 3, "max": 2},
        "ReplicasMinExceedsMax",
        "spec.poolDefaults.replicas.min",
    ),
    (
        "repeated GPU type",
        "pools",
        [{"gpuType": "A"}, {"gpuType": "A"}],
        "PoolGpuTypeRepeated",
        "spec.pools[1].gpuType",
    ),
    (
        "unordered batch sizes",
        "profiling.batchSizes",
        [1, 4, 2],
        "BatchSizesUnordered",
        "spec.profiling.batchSizes[2]",
    ),
    (
        "extra args override the table",
        "vllm.extraArgs",
        ["--speculative-config={}"],
        "ExtraArgsOverrideManagedFlags",
        "spec.vllm.extraArgs[0]",
    ),
    (
        "grace shorter than the drain",
        "vllm.terminationGracePeriodSeconds",
        20,
        "DrainLongerThanGrace",
        "spec.vllm.terminationGracePeriodSeconds",
    ),
    (
        "a malformed node selector",
        "nodeSelector",
        {"bad key!": "x"},
        "NodeSelectorMalformed",
        "spec.nodeSelector",
    ),
    ("maxK of zero", "speculation.maxK", 0, "SchemaViolation", "spec.speculation.maxK"),
    (
        "an unknown method",
        "speculation.method",
        "medusa2",
        "SchemaViolation",
        "spec.speculation.method",
    ),
    ("an unknown field", "speculation.maxk", 3, "SchemaViolation", "spec.speculation.maxk"),
    ("a missing model", "model", DELETE, "SchemaViolation", "spec.model"),
    (
        "a bad telemetry interval",
        "telemetry.interval",
        "soon",
        "SchemaViolation",
        "spec.telemetry.interval",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "reason", "field"),
    [b[1:] for b in BAD],
    ids=[b[0] for b in BAD],
)
def test_an_invalid_field_is_rejected_with_a_reason_naming_it(
    path: str, value: Any, reason: str, field: str
) -> None:
    verdict = validate(with_change(path, value))
    assert not verdict.valid
    assert verdict.problems[0].reason == reason
    assert any(p.message.startswith(field) for p in verdict.problems), verdict.problems


def test_a_pool_excluded_by_the_node_selector_is_rejected() -> None:
    spec = with_change("pools", [{"gpuType": "A"}])
    spec["nodeSelector"] = {"nvidia.com/gpu.product": "B"}
    verdict = validate(spec)
    assert [p.reason for p in verdict.problems] == ["PoolExcludedByNodeSelector"]
    assert verdict.problems[0].message.startswith("spec.pools[0].gpuType")


def test_the_example_is_valid() -> None:
    verdict = validate(example_spec())
    assert verdict.valid, verdict.problems


def test_mtp_needs_no_draft_model() -> None:
    spec = with_change("speculation.method", "mtp")
    del spec["speculation"]["draftModel"]
    assert validate(spec).valid


def test_every_problem_is_reported_not_only_the_first() -> None:
    spec = with_change("speculation.fixedK", 9)
    spec["profiling"]["batchSizes"] = [2, 1]
    assert {p.reason for p in validate(spec).problems} == {
        "FixedKExceedsMaxK",
        "BatchSizesUnordered",
    }


def test_a_spec_that_is_not_an_object_is_rejected() -> None:
    assert validate(None).problems[0].message.startswith("spec:")


def test_reasons_are_the_predicate_names_in_camel_case() -> None:
    reasons = [reason_of(p) for p in PREDICATES]
    assert "FixedKExceedsMaxK" in reasons
    assert len(set(reasons)) == len(reasons)
