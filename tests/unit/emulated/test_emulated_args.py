"""The emulator reads the serving container's command line exactly as the operator writes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from e2e.emulated.args import ArgsError, parse_args, parse_speculative_config
from e2e.emulated.ksource import AddonK, FixedK, Vanilla, VllmLookup, addon_env, build_ksource
from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.deployment import HTTP_PORT, ServingPool, startup_table, vllm_args
from specdeploy.runtime.contract import SCHEDULER_CLS
from tests.paths import EXAMPLES

SCHEDULE = ((1, 16, 5), (17, 64, 3), (65, 256, 1))


def example_spec(**vllm: Any) -> SpeculativeDeploymentSpec:
    body = yaml.safe_load((EXAMPLES / "specdeploy.yaml").read_text())
    body["spec"]["vllm"] = {**body["spec"].get("vllm", {}), **vllm}
    return SpeculativeDeploymentSpec.model_validate(body["spec"])


def pool(schedule: tuple[tuple[int, int, int], ...] | None) -> ServingPool:
    return ServingPool("p", "cm", "NVIDIA-H100-80GB-HBM3", 1, 1, "prof", schedule)


def test_the_operators_serving_args_parse_to_what_they_say() -> None:
    spec = example_spec(extraArgs=["--max-model-len=4096", "--enable-prefix-caching"])
    args = parse_args(vllm_args(spec, pool(SCHEDULE)))
    assert args.model == spec.model.name
    assert args.served_model_names == (spec.served_name(),)
    assert args.port == HTTP_PORT and args.tensor_parallel_size == 1
    assert args.max_model_len == 4096 and args.max_num_seqs == 256
    assert args.shutdown_timeout > 0
    assert args.scheduler_cls == SCHEDULER_CLS
    assert args.speculation is not None
    assert args.speculation.method == spec.speculation.method.value
    assert args.speculation.num_speculative_tokens == spec.speculation.max_k
    # the pod starts with its K set, not the pool's schedule (the ConfigMap has that)
    expected = tuple(tuple(r) for r in startup_table(spec.speculation.max_k))
    assert args.speculation.per_batch_size == expected
    assert args.ignored == ("--enable-prefix-caching",)


def test_vllms_lookup_is_built_from_the_table() -> None:
    spec = example_spec()
    args = parse_args([*vllm_args(spec, pool(SCHEDULE)), "--max-num-seqs=128"])
    assert args.speculation is not None
    lookup = args.speculation.lookup(args.max_num_seqs)
    assert lookup is not None and len(lookup) == 129
    # the pod's start-up table (every K of its K set), expanded as vLLM does
    picks = (1, 2, 3, 4, 5, 8, 9, 16, 17, 128)
    assert tuple(lookup[b] for b in picks) == (5, 4, 3, 3, 2, 2, 1, 1, 0, 0)


def test_unknown_flags_and_their_values_are_ignored_not_fatal() -> None:
    args = parse_args(["m", "--enforce-eager", "--kv-cache-dtype", "fp8", "--host=0.0.0.0"])
    assert args.model == "m" and args.speculation is None
    assert args.ignored == ("--enforce-eager", "--kv-cache-dtype", "fp8", "--host=0.0.0.0")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{nope", "not valid JSON", id="not JSON"),
        pytest.param("[1]", "expected a JSON object", id="not an object"),
        pytest.param('{"num_speculative_tokens": 3}', "method: required", id="no method"),
        pytest.param('{"method": "ngram"}', "num_speculative_tokens", id="no K"),
        pytest.param(
            '{"method": "ngram", "num_speculative_tokens": 3, '
            '"num_speculative_tokens_per_batch_size": [[1, 2]]}',
            "expected [[lo, hi, K], ...]",
            id="bad table shape",
        ),
    ],
)
def test_a_bad_speculative_config_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ArgsError, match=r"--speculative-config") as err:
        parse_speculative_config(text)
    assert message in str(err.value)


def test_a_table_vllm_would_refuse_stops_the_start() -> None:
    config = {"method": "eagle3", "num_speculative_tokens": 3,
              "num_speculative_tokens_per_batch_size": [[1, 8, 3], [4, 256, 1]]}  # fmt: skip
    with pytest.raises(ArgsError, match="num_speculative_tokens_per_batch_size"):
        parse_args(["m", f"--speculative-config={json.dumps(config)}"])


@pytest.mark.parametrize("flag", ["--port=0", "--max-num-seqs=0", "--shutdown-timeout=-1"])
def test_out_of_range_numbers_are_refused(flag: str) -> None:
    with pytest.raises(ArgsError, match=flag.split("=")[0]):
        parse_args(["m", flag])


def test_the_k_source_follows_what_vllm_would_build() -> None:
    spec = example_spec()
    table = parse_args(vllm_args(spec, pool(SCHEDULE)))
    no_addon = parse_args([a for a in vllm_args(spec, pool(SCHEDULE)) if "scheduler-cls" not in a])
    fixed = parse_args(["m", '--speculative-config={"method":"eagle3","num_speculative_tokens":4}'])
    plain = parse_args(vllm_args(spec, pool(None)))
    assert isinstance(build_ksource(plain, {}), Vanilla)
    k = build_ksource(fixed, {})
    assert isinstance(k, FixedK) and k.choose(1) == k.choose(200) == 4
    own = build_ksource(no_addon, {})
    assert isinstance(own, VllmLookup) and (own.choose(1), own.choose(100)) == (5, 0)
    addon = build_ksource(table, {"SPECDEPLOY_POLICY": "table"})
    try:
        assert isinstance(addon, AddonK)
        # no table file: the add-on follows vLLM's own lookup
        assert (addon.choose(1), addon.choose(12), addon.choose(300)) == (5, 1, 0)
    finally:
        addon.close()


def test_the_addons_metrics_are_forced_onto_loopback() -> None:
    env = addon_env({"SPECDEPLOY_METRICS_ADDR": "0.0.0.0", "OTHER": "x"})
    assert env["SPECDEPLOY_METRICS_ADDR"] == "127.0.0.1" and env["OTHER"] == "x"
