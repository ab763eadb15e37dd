"""Inputs the API fuzzer (``e2e/fuzz``, issue 15 F1) found passing admission and validation,
after which the API server refused every child that carried them (Applied=False,
retried). Each is now refused up front, naming the field; its neighbours still pass.
The fuzz cases themselves are replayed from ``e2e/fuzz/regressions/``.
"""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.operator.decision.validation import validate
from tests.unit.operator.test_operator_validation import with_change


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("model.tokenSecretRef", {"name": "HF_Token"}, "spec.model.tokenSecretRef.name"),
        ("model.tokenSecretRef", {"name": "-x"}, "spec.model.tokenSecretRef.name"),
        ("model.tokenSecretRef", {"name": "hf", "key": "a/b"}, "spec.model.tokenSecretRef.key"),
        ("model.tokenSecretRef", {"name": "hf", "key": "a b"}, "spec.model.tokenSecretRef.key"),
        (
            "tolerations",
            [{"key": "k", "operator": "Equal", "value": "a b"}],
            "spec.tolerations[0].value",
        ),
        ("tolerations", [{"key": "k", "value": "v" * 64}], "spec.tolerations[0].value"),
    ],
    ids=[
        "secret-name-uppercase",
        "secret-name-leading-dash",
        "secret-key-slash",
        "secret-key-space",
        "toleration-value-space",
        "toleration-value-64",
    ],
)
def test_a_value_the_api_server_refuses_in_a_pod_is_refused_naming_the_field(
    path: str, value: Any, field: str
) -> None:
    verdict = validate(with_change(path, value))
    assert not verdict.valid
    assert any(p.message.startswith(field) for p in verdict.problems), verdict.problems


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("model.tokenSecretRef", {"name": "hf-token.v2", "key": "HF_TOKEN.value-1"}),
        ("tolerations", [{"key": "k", "operator": "Equal", "value": "My_value.1"}]),
        ("tolerations", [{"key": "k", "operator": "Equal", "value": "v" * 63}]),
        ("tolerations", [{"operator": "Exists", "value": ""}]),
    ],
    ids=["secret-ref", "toleration-value", "toleration-value-63", "exists-empty-value"],
)
def test_the_values_pods_accept_still_pass(path: str, value: Any) -> None:
    assert validate(with_change(path, value)).valid
