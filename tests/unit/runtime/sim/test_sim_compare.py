"""The comparison's policies: the pod's K set and the product's plain-decoding floor."""

from __future__ import annotations

import numpy as np
import pytest

from specdeploy.runtime.floor import judge
from specdeploy.runtime.policy import AdaptivePolicy
from specdeploy.runtime.schedule import vanilla_gain
from specdeploy.runtime.sim.compare import Comparison, RunSettings, parse_policies
from specdeploy.runtime.sim.presets import get_preset
from specdeploy.runtime.sim.profiling import profile_preset
from specdeploy.runtime.sim.workload import ClosedLoop, OpenLoop

PRESET = get_preset("seed-dense")


@pytest.fixture(scope="module")
def cmp() -> Comparison:
    profile = profile_preset(PRESET, (1, 8, 64, 256), steps=48, seed=1)
    return Comparison(PRESET, profile, RunSettings(steps=200, warmup_steps=50, seeds=(0,)))


def test_the_adaptive_pod_runs_the_tables_k_and_zero(cmp: Comparison) -> None:
    """The add-on keeps K inside the started table's K set; the operator adds 0."""
    table_k = set(cmp.build("table").lookup[1:])  # type: ignore[union-attr]
    assert 0 not in table_k  # seed-dense's schedule never says 0 ...
    policy = cmp.build("adaptive")
    assert isinstance(policy, AdaptivePolicy)
    assert set(policy.allowed_k) == table_k | {0}  # ... yet its pod can always reach it


def test_specdeploy_serves_plain_decoding_where_the_floor_says_speculation_loses(
    cmp: Comparison,
) -> None:
    gains = vanilla_gain(cmp.profile.spec)
    assert gains is not None
    losing = [bs for bs in (1, 8, 64, 256) if gains[bs] < 1.0]
    winning = [bs for bs in (1, 8, 64, 256) if gains[bs] >= 1.0]
    assert losing == [256] and winning  # modelled: the best K loses to vanilla at 256 only
    for bs in losing:
        assert cmp.resolve("specdeploy", ClosedLoop(bs)) == "vanilla"
        plain = cmp.run_named("specdeploy", ClosedLoop(bs), seed=0)
        assert plain.mean_k == 0.0
        assert plain.tokens_per_s == cmp.run_named("vanilla", ClosedLoop(bs), seed=0).tokens_per_s
    for bs in winning:
        assert cmp.resolve("specdeploy", ClosedLoop(bs)) == "adaptive"
    assert cmp.resolve("table", ClosedLoop(256)) == "table"  # only the product has a floor


def test_without_a_single_served_size_the_floor_judges_the_profiled_sizes(
    cmp: Comparison,
) -> None:
    """As the operator does until telemetry reports the sizes a pool serves."""
    verdict = cmp.floor(OpenLoop(lambda t: 5.0))
    assert verdict == judge(cmp.profile.spec, [1, 8, 64, 256])
    assert not verdict.loses and cmp.resolve("specdeploy", OpenLoop(lambda t: 5.0)) == "adaptive"
    assert verdict.gain is not None and np.isfinite(verdict.gain)


def test_specdeploy_is_a_policy_name() -> None:
    assert parse_policies("vanilla,specdeploy", max_k=5) == ["vanilla", "specdeploy"]
    with pytest.raises(ValueError, match="specdeploy"):
        parse_policies("nope", max_k=5)
