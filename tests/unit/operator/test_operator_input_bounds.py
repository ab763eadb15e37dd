"""Inputs that passed validation at 7a48b4a and broke the pods or the API server's writes.

Inverted probes of ``reviews/probes/test_reliability_probes.py`` (review M5, M6):
extraArgs that set a managed flag through vLLM's own spellings (``_`` for
``-``, a dotted key into a JSON flag), flags that move the server off its port
or split it into data-parallel ranks, a model name vLLM would read as a flag,
and unbounded numbers and strings. Each is now refused, with a message
naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.operator.decision.validation import flag_name, validate
from tests.unit.operator.test_operator_validation import with_change


@pytest.mark.parametrize(
    "arg",
    [
        '--speculative_config={"method":"ngram","num_speculative_tokens":3}',
        "--scheduler_cls=vllm.v1.core.sched.scheduler.Scheduler",
        "--speculative-config.num_speculative_tokens=8",
        "--tensor_parallel_size=8",
        "--data-parallel-size=2",
        "--uds=/run/vllm.sock",
        "--PORT=9000",
        "-dp",
    ],
)
def test_extra_args_cannot_set_a_managed_flag_in_any_spelling(arg: str) -> None:
    verdict = validate(with_change("vllm.extraArgs", [arg]))
    assert not verdict.valid
    assert any("spec.vllm.extraArgs[0]" in p.message for p in verdict.problems)


@pytest.mark.parametrize("arg", ["--max-model-len=8192", "--enable-prefix-caching", "8192"])
def test_ordinary_extra_args_pass(arg: str) -> None:
    assert validate(with_change("vllm.extraArgs", [arg])).valid


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--speculative_config.method=x", "--speculative-config"),
        ("--Max_Model_Len=1", "--max-model-len"),
        ("-tp", "-tp"),
        ("value", "value"),
    ],
)
def test_flag_names_are_read_as_vllm_reads_them(arg: str, flag: str) -> None:
    assert flag_name(arg) == flag


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("model.name", "--trust-remote-code", "spec.model.name"),
        ("model.name", "x" * 300_000, "spec.model.name"),
        ("model.servedModelName", "-x", "spec.model.servedModelName"),
        ("profiling.batchSizes", [1, 10**9], "spec.profiling.batchSizes"),
        ("vllm.extraArgs", ["x" * 5000], "spec.vllm.extraArgs"),
    ],
    ids=["model-as-flag", "huge-model-name", "served-name-as-flag", "huge-batch", "huge-arg"],
)
def test_unbounded_or_flag_like_input_is_refused_naming_the_field(
    path: str, value: Any, field: str
) -> None:
    verdict = validate(with_change(path, value))
    assert not verdict.valid
    assert any(field in p.message for p in verdict.problems), verdict.problems


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("vllm.podAnnotations", {"not a valid key!": "x"}, "spec.vllm.podAnnotations"),
        ("profiling.podAnnotations", {"-bad": "x"}, "spec.profiling.podAnnotations"),
        (
            "tolerations",
            [{"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 30}],
            "spec.tolerations[0].tolerationSeconds",
        ),
        (
            "tolerations",
            [{"operator": "Exists", "key": "k", "value": "v"}],
            "spec.tolerations[0].value",
        ),
        ("tolerations", [{"effect": "NoSchedule"}], "spec.tolerations[0].key"),
    ],
    ids=[
        "bad-pod-annotation",
        "bad-profiler-annotation",
        "seconds-not-NoExecute",
        "exists-with-value",
        "empty-key-equal",
    ],
)
def test_children_the_api_server_would_refuse_are_refused_first(
    path: str, value: Any, field: str
) -> None:
    """Review H4: these passed admission and validation, and the API server then refused
    the children (422), which blocked the deployment's other writes."""
    verdict = validate(with_change(path, value))
    assert not verdict.valid
    assert any(field in p.message for p in verdict.problems), verdict.problems


def test_ordinary_annotations_and_tolerations_pass() -> None:
    spec = with_change("vllm.podAnnotations", {"sidecar.istio.io/inject": "false"})
    spec["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "k",
            "operator": "Equal",
            "value": "v",
            "effect": "NoExecute",
            "tolerationSeconds": 5,
        },
        {"operator": "Exists"},
    ]
    assert validate(spec).valid, validate(spec).problems
