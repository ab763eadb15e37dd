"""specdeploy.runtime.policy: the baselines, input validation, profiles, the factory."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.policy import (
    AdaptiveConfig,
    AdaptivePolicy,
    FixedPolicy,
    TablePolicy,
    VanillaPolicy,
    build_policy,
    static_lookup,
)
from specdeploy.runtime.policy.base import KPolicy, StepRecord
from specdeploy.runtime.profile import load_profile
from specdeploy.runtime.ranges import expand_lookup
from specdeploy.runtime.schedule import itl_grid, k_values
from tests.paths import EXAMPLES

EXAMPLE = EXAMPLES / "profile-example.yaml"


def small_grid() -> FloatArray:
    """ITL ms for batch sizes 0..8 and K 0..3 (row 0 unused)."""
    bs = np.arange(9, dtype=np.float64)[:, np.newaxis]
    k = np.arange(4, dtype=np.float64)[np.newaxis, :]
    grid: FloatArray = 5.0 + 0.2 * k + 0.5 * bs * (k + 1)
    grid[0] = np.nan
    return grid


# --- the baselines ---------------------------------------------------------


def test_vanilla_never_speculates_and_learns_nothing() -> None:
    policy = VanillaPolicy()
    policy.observe(StepRecord(4, 3, 0.01, [4, 3, 2], [4, 3, 2], [3, 2, 1]))
    assert policy.name == "vanilla"
    assert {policy.choose_k(bs) for bs in range(0, 600)} == {0}


def test_fixed_policy_returns_its_k_everywhere() -> None:
    policy = FixedPolicy(3)
    assert policy.name == "fixed:3"
    assert {policy.choose_k(bs) for bs in range(0, 600)} == {3}


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_fixed_policy_rejects_a_bad_k(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^k must"):
        FixedPolicy(bad)  # type: ignore[arg-type]


def test_table_policy_indexes_by_raw_batch_size_and_clamps_at_the_end() -> None:
    policy = TablePolicy([0, 5, 4, 3, 1])
    assert policy.name == "table"
    assert [policy.choose_k(bs) for bs in range(0, 8)] == [0, 5, 4, 3, 1, 1, 1, 1]
    assert policy.choose_k(-3) == 0


def test_table_policy_flips_every_step_across_a_threshold() -> None:
    """The baseline has no memory: a jitter across a threshold flips K each step."""
    policy = TablePolicy([0, 3, 3, 2, 2])
    chosen = [policy.choose_k(2 if step % 2 else 3) for step in range(100)]
    assert sum(a != b for a, b in itertools.pairwise(chosen)) == 99


@pytest.mark.parametrize(
    ("lookup", "message"),
    [([], "lookup: must not be empty"), ([0, 2, -1], r"lookup\[2\]"), ([0, 1.0], r"lookup\[1\]")],
)
def test_table_policy_rejects_a_bad_lookup(lookup: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TablePolicy(lookup)


def test_every_policy_satisfies_the_protocol() -> None:
    policies: list[object] = [
        VanillaPolicy(),
        FixedPolicy(2),
        TablePolicy([0, 1]),
        AdaptivePolicy(small_grid(), [0.8, 0.7, 0.6]),
    ]
    assert all(isinstance(p, KPolicy) for p in policies)
    assert [p.name for p in policies if isinstance(p, KPolicy)] == [
        "vanilla",
        "fixed:2",
        "table",
        "adaptive",
    ]


# --- adaptive: bad input names the parameter -----------------------------------


def test_empty_allowed_set_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^allowed_k: must not be empty"):
        AdaptivePolicy(small_grid(), [0.8, 0.7, 0.6], allowed_k=[])


def test_a_grid_without_any_finite_cell_has_no_allowed_k() -> None:
    grid = np.full((5, 3), np.nan)
    with pytest.raises(ValueError, match=r"^allowed_k"):
        AdaptivePolicy(grid, [0.8, 0.7])


@pytest.mark.parametrize("allowed", [[0, 4], [-1, 0], [0, True]])
def test_allowed_k_outside_the_grid_is_refused(allowed: list[int]) -> None:
    with pytest.raises(ValueError, match=r"^allowed_k: K="):
        AdaptivePolicy(small_grid(), [0.8, 0.7, 0.6], allowed_k=allowed)


def test_allowed_k_without_step_times_is_refused() -> None:
    grid = small_grid()
    grid[:, 2] = np.nan
    with pytest.raises(ValueError, match=r"^allowed_k: K=2 has no finite step time"):
        AdaptivePolicy(grid, [0.8, 0.7, 0.6], allowed_k=[0, 2])


@pytest.mark.parametrize("prior", [[], [0.8], [0.8, 0.7]])
def test_prior_shorter_than_the_largest_k_is_refused(prior: list[float]) -> None:
    with pytest.raises(ValueError, match=r"^prior: has .* positions but allowed_k goes up to K=3"):
        AdaptivePolicy(small_grid(), prior)


@pytest.mark.parametrize("prior", [[0.8, 1.2, 0.5], [0.8, -0.1, 0.5], [0.8, float("nan"), 0.5]])
def test_prior_outside_unit_interval_is_refused(prior: list[float]) -> None:
    with pytest.raises(ValueError, match=r"^prior\[1\]"):
        AdaptivePolicy(small_grid(), prior)


def test_prior_may_be_short_when_large_k_are_not_allowed() -> None:
    policy = AdaptivePolicy(small_grid(), [0.8], allowed_k=[0, 1])
    assert policy.allowed_k == (0, 1)
    assert {policy.choose_k(bs) for bs in range(1, 20)} <= {0, 1}


@pytest.mark.parametrize("value", [0.0, -3.0, float("inf"), float("-inf")])
def test_non_positive_or_infinite_itl_is_refused(value: float) -> None:
    grid = small_grid()
    grid[4, 2] = value
    with pytest.raises(ValueError, match=r"^itl_ms: .* at batch size 4, K=2"):
        AdaptivePolicy(grid, [0.8, 0.7, 0.6])


@pytest.mark.parametrize("shape", [(9,), (1, 4), (9, 0), (2, 3, 4)])
def test_grid_of_the_wrong_shape_is_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"^itl_ms: must be 2-D"):
        AdaptivePolicy(np.ones(shape), [0.8, 0.7, 0.6])


def test_a_batch_size_with_no_allowed_cell_is_refused() -> None:
    grid = small_grid()
    grid[5, :] = np.nan
    with pytest.raises(ValueError, match=r"^itl_ms: batch size 5 has no finite step time"):
        AdaptivePolicy(grid, [0.8, 0.7, 0.6])


def test_fallback_outside_the_allowed_set_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^fallback\[2\]: K=3 is not in allowed_k"):
        AdaptivePolicy(small_grid(), [0.8, 0.7, 0.6], allowed_k=[0, 1, 2], fallback=[0, 2, 3])
    with pytest.raises(ValueError, match=r"^fallback: must not be empty"):
        AdaptivePolicy(small_grid(), [0.8, 0.7, 0.6], fallback=[])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("recompute_interval", 0),
        ("bs_smoothing", 0.0),
        ("bs_smoothing", 1.5),
        ("switch_margin", -0.01),
        ("min_dwell_steps", -1),
        ("acceptance_half_life_tokens", 0.0),
        ("acceptance_prior_weight", float("nan")),
        ("change_z", 0.0),
        ("acceptance_drift_per_step", -1e-6),
        ("cost_prior_weight", -1.0),
        ("cost_half_life_steps", 0.0),
        ("throughput_half_life_steps", float("inf")),
        ("explore_budget", 1.0),
        ("explore_z", -1.0),
        ("objective", "goodput"),
    ],
)
def test_config_out_of_range_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        AdaptiveConfig(**{field: value})  # type: ignore[arg-type]


def test_default_config_is_valid_and_frozen() -> None:
    config = AdaptiveConfig()
    assert config.recompute_interval == 64
    assert 0.0 < config.switch_margin <= 0.01
    assert config.objective == "latency"
    with pytest.raises(AttributeError):
        config.switch_margin = 0.5  # type: ignore[misc]


# --- from a profile ----------------------------------------------------------


def test_adaptive_from_profile_uses_the_grid_the_prior_and_the_measured_k() -> None:
    doc = load_profile(EXAMPLE)
    policy = AdaptivePolicy.from_profile(doc)
    grid = itl_grid(doc.spec)
    assert policy.allowed_k == k_values(doc.spec)
    assert policy.max_batch_size == grid.shape[0] - 1
    assert policy.estimates().acceptance == pytest.approx(doc.spec.acceptance.per_position)
    estimate = policy.explain(32)[2]
    assert estimate.itl_ms == pytest.approx(grid[32, 2])
    assert estimate.itl_correction == 1.0


def test_disabled_adaptive_returns_the_profile_table() -> None:
    """The off switch falls back on exactly what vLLM's static table would do."""
    doc = load_profile(EXAMPLE)
    policy = AdaptivePolicy.from_profile(doc, max_batch_size=300)
    table = TablePolicy.from_profile(doc, max_batch_size=300)
    policy.enabled = False
    sizes = range(1, 400)
    assert [policy.choose_k(bs) for bs in sizes] == [table.choose_k(bs) for bs in sizes]
    assert policy.steps == 0


def test_static_lookup_prefers_the_profile_schedule() -> None:
    doc = load_profile(EXAMPLE)
    own = doc.with_schedule([(1, 10, 4), (11, 256, 1)])
    assert static_lookup(own.spec, 20) == expand_lookup([(1, 10, 4), (11, 256, 1)], 5, 20)
    assert static_lookup(own.spec, 20) == [0] + [4] * 10 + [1] * 10


def test_build_policy_maps_every_kind() -> None:
    doc = load_profile(EXAMPLE)
    assert isinstance(build_policy("off"), VanillaPolicy)
    assert isinstance(build_policy("vanilla"), VanillaPolicy)
    fixed = build_policy("fixed", fixed_k=3)
    assert isinstance(fixed, FixedPolicy)
    assert fixed.k == 3
    assert isinstance(build_policy("table", doc), TablePolicy)
    config = AdaptiveConfig(switch_margin=0.05)
    adaptive = build_policy("adaptive", doc.spec, config=config, max_batch_size=64)
    assert isinstance(adaptive, AdaptivePolicy)
    assert adaptive.config is config
    assert adaptive.max_batch_size == 64


@pytest.mark.parametrize(
    ("kind", "kwargs", "message"),
    [
        ("fixed", {}, "^fixed_k: required"),
        ("table", {}, "^profile: required"),
        ("adaptive", {}, "^profile: required"),
        ("bandit", {}, "^kind: unknown policy 'bandit'"),
    ],
)
def test_build_policy_refuses_what_it_cannot_build(
    kind: str, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build_policy(kind, **kwargs)  # type: ignore[arg-type]
