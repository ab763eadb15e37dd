"""The vLLM add-on without vLLM: settings, table files, the controller, hot reload, metrics.

The parts that touch vLLM's real Scheduler are tested in tests/vllm/.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.runtime.contract import bucket_label
from specdeploy.runtime.policy.adaptive import AdaptivePolicy
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.policy.static import FixedPolicy, TablePolicy
from specdeploy.runtime.vllm_addon.assembly import AddonRefused, start_addon
from specdeploy.runtime.vllm_addon.controller import SLOW_TICK_STEPS, KController
from specdeploy.runtime.vllm_addon.drafting import DraftingRateWatch, Drift
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from specdeploy.runtime.vllm_addon.self_time import TIMING_ENV, SelfTimer, timing_requested
from specdeploy.runtime.vllm_addon.settings import AddonSettings, SettingsError
from specdeploy.runtime.vllm_addon.steps import NO_DECODE, StepReading
from specdeploy.runtime.vllm_addon.table_source import (
    EngineShape,
    LoadedTable,
    TableError,
    clamp_map,
    load_table,
)
from specdeploy.runtime.vllm_addon.watcher import TableWatcher
from tests.paths import FIXTURES, ROOT

FIXTURE = FIXTURES / "profile-small.yaml"
SHAPE = EngineShape(num_speculative_tokens=3, max_batch_size=64, allowed_k=(0, 1, 2, 3))
VLLM_LOOKUP = [0] + [3] * 4 + [1] * 60  # vLLM's own table: 1-4 -> 3, 5-64 -> 1


def profile_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())["spec"]
    return spec


def table_doc(policy: str | None = "table", **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "policy": policy,
        "maxK": 3,
        "fixedK": None,
        "profile": "test-small",
        "schedule": [[1, 8, 2], [9, 64, 0]],
    }
    doc.update(changes)
    return doc


def encode(doc: object) -> bytes:
    return json.dumps(doc).encode()


def load(doc: dict[str, Any], profile: dict[str, Any] | None = None, **kw: Any) -> LoadedTable:
    return load_table(
        encode(doc),
        None if profile is None else encode(profile),
        kw.pop("shape", SHAPE),
        default_policy=kw.pop("default_policy", "adaptive"),
        adaptive=AddonSettings().adaptive,
    )


# --- settings ------------------------------------------------------------------


def test_settings_read_every_variable_the_operator_sets() -> None:
    env = {
        "SPECDEPLOY_TABLE_FILE": "/etc/specdeploy/table/table.json",
        "SPECDEPLOY_POLICY": "table",
        "SPECDEPLOY_METRICS_PORT": "9400",
        "SPECDEPLOY_POOL": "NVIDIA-H200",
        "SPECDEPLOY_PROFILE": "p-123",
        "SPECDEPLOY_ADAPTIVE": '{"switch_margin": 0.05}',
    }
    s = AddonSettings.from_env(env)
    assert s.table_file == Path("/etc/specdeploy/table/table.json")
    assert s.profile_path == Path("/etc/specdeploy/table/profile.json")
    assert (s.policy, s.metrics_port, s.pool, s.profile) == ("table", 9400, "NVIDIA-H200", "p-123")
    assert s.adaptive.switch_margin == 0.05


def test_settings_default_to_no_table_no_endpoint_and_adaptive() -> None:
    s = AddonSettings.from_env({})
    assert (s.table_file, s.metrics_port, s.policy, s.reload_seconds) == (None, 0, "adaptive", 5.0)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("SPECDEPLOY_POLICY", "greedy", "SPECDEPLOY_POLICY"),
        ("SPECDEPLOY_METRICS_PORT", "http", "SPECDEPLOY_METRICS_PORT"),
        ("SPECDEPLOY_METRICS_PORT", "70000", "SPECDEPLOY_METRICS_PORT"),
        ("SPECDEPLOY_RELOAD_SECONDS", "-1", "SPECDEPLOY_RELOAD_SECONDS"),
        ("SPECDEPLOY_ALLOWED_K", "0,two", "SPECDEPLOY_ALLOWED_K"),
        ("SPECDEPLOY_ADAPTIVE", '{"switch_margin": -1}', "switch_margin"),
        ("SPECDEPLOY_ADAPTIVE", '{"no_such_knob": 1}', "no_such_knob"),
        ("SPECDEPLOY_ADAPTIVE", "not json", "SPECDEPLOY_ADAPTIVE"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(variable: str, value: str, named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        AddonSettings.from_env({variable: value})


def test_a_config_file_gives_settings_and_the_environment_wins(tmp_path: Path) -> None:
    path = tmp_path / "addon.yaml"
    path.write_text("policy: fixed\nreload_seconds: 1.5\nmetrics_port: 9500\n")
    env = {"SPECDEPLOY_CONFIG_FILE": str(path), "SPECDEPLOY_METRICS_PORT": "9600"}
    s = AddonSettings.from_env(env)
    assert (s.policy, s.reload_seconds, s.metrics_port) == ("fixed", 1.5, 9600)
    path.write_text("polcy: fixed\n")
    with pytest.raises(SettingsError, match="unknown keys"):
        AddonSettings.from_env(env)


def test_allowed_k_defaults_to_the_k_values_the_engine_started_with() -> None:
    assert AddonSettings().allowed_k_values({3, 1}, 3) == {1, 3}
    assert AddonSettings(allowed_k="all").allowed_k_values({3, 1}, 3) == {0, 1, 2, 3}
    assert AddonSettings(allowed_k="0,2,7").allowed_k_values({3}, 3) == {0, 2}


# --- table files -----------------------------------------------------------------


def test_each_policy_kind_builds_its_policy() -> None:
    assert load(table_doc("off")).policy is None
    fixed = load(table_doc("fixed", fixedK=2)).policy
    assert isinstance(fixed, FixedPolicy) and fixed.k == 2
    table = load(table_doc("table")).policy
    assert isinstance(table, TablePolicy)
    assert [table.choose_k(b) for b in (1, 8, 9, 64, 500)] == [2, 2, 0, 0, 0]
    adaptive = load(table_doc("adaptive"), profile_spec()).policy
    assert isinstance(adaptive, AdaptivePolicy)
    assert adaptive.max_batch_size == SHAPE.max_batch_size


def test_the_table_policy_wins_over_the_default() -> None:
    assert load(table_doc("table"), default_policy="off").policy_kind == "table"
    assert load(table_doc(None), default_policy="off").policy_kind == "off"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (table_doc(maxK=5), "maxK: 5 exceeds the engine's num_speculative_tokens 3"),
        (table_doc(schedule=[[1, 8, 4]]), r"schedule\[0\]: K=4 exceeds maxK 3"),
        (table_doc(schedule=[[1, 8, 2.0]]), r"schedule\[0\]\[2\]: Input should be a valid integer"),
        (table_doc(schedule=[[2, 8, 2]]), "schedule"),
        (table_doc(schedule=[]), "must not be empty"),
        (table_doc("fixed", fixedK=None), "fixedK"),
        (table_doc("greedy"), r"policy: Input should be .*\(got 'greedy'\)"),
        (table_doc("adaptive"), "adaptive policy needs the profile"),
    ],
)
def test_a_bad_table_is_refused_naming_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(TableError, match=message):
        load(doc)


def test_a_bad_profile_is_refused_naming_the_field() -> None:
    spec = profile_spec()
    spec["acceptance"]["perPosition"] = [0.8, 1.7, 0.4]
    with pytest.raises(TableError, match=r"acceptance\.perPosition"):
        load(table_doc("adaptive"), spec)
    with pytest.raises(TableError, match="not valid JSON"):
        load_table(b"{", None, SHAPE, default_policy="table", adaptive=AddonSettings().adaptive)


def test_the_adaptive_policy_only_uses_k_the_engine_allows() -> None:
    shape = EngineShape(3, 64, allowed_k=(0, 2))
    policy = load(table_doc("adaptive"), profile_spec(), shape=shape).policy
    assert isinstance(policy, AdaptivePolicy)
    assert policy.allowed_k == (0, 2)
    none_allowed = EngineShape(3, 64, allowed_k=(3,))
    spec = profile_spec()
    spec["measurements"] = [m for m in spec["measurements"] if m["k"] != 3]
    with pytest.raises(TableError, match="none of which the engine allows"):
        load(table_doc("adaptive"), spec, shape=none_allowed)


def test_clamp_map_rounds_down_into_the_allowed_set() -> None:
    assert clamp_map((1, 3), 4) == [1, 1, 1, 3, 3]
    assert clamp_map((0, 2), 3) == [0, 0, 2, 2]


# --- the controller ----------------------------------------------------------------


def test_without_a_table_k_is_vllms_own_lookup() -> None:
    c = KController(VLLM_LOOKUP, SHAPE)
    assert [c.choose_k(b) for b in (1, 4, 5, 64, 1000)] == [3, 3, 1, 1, 1]


def test_policy_off_is_exactly_vllms_lookup_and_a_table_replaces_it() -> None:
    c = KController(VLLM_LOOKUP, SHAPE)
    c.install(load(table_doc("off")))
    assert [c.choose_k(b) for b in range(1, 65)] == VLLM_LOOKUP[1:]
    c.install(load(table_doc("table")))
    assert [c.choose_k(b) for b in (1, 8, 9, 64)] == [2, 2, 0, 0]
    assert c.generation == 2


def test_k_outside_the_engine_set_is_clamped_down() -> None:
    c = KController(VLLM_LOOKUP, EngineShape(3, 64, allowed_k=(1, 3)))
    c.install(load(table_doc("fixed", fixedK=2)))
    assert c.choose_k(1) == 1
    c.install(load(table_doc("fixed", fixedK=0)))
    assert c.choose_k(1) == 1  # nothing allowed below: the smallest allowed K


class Exploding(FixedPolicy):
    def choose_k(self, batch_size: int) -> int:
        raise RuntimeError("bug")

    def observe(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug")


def test_a_raising_policy_falls_back_to_vllm_logs_once_and_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    c.install(LoadedTable("fixed", Exploding(1), (), "", "d"))
    with caplog.at_level(logging.ERROR, logger="specdeploy.addon"):
        assert [c.choose_k(b) for b in (1, 5)] == [3, 1]
        c.step_done(1, 3, 0.01, [(3, 2)])
    assert len([r for r in caplog.records if "policy" in r.message]) == 1
    assert sample(metrics, "specdeploy_policy_errors_total", pool="pool") == 3


class Recording(FixedPolicy):
    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.seen: list[StepRecord] = []

    def observe(self, step: StepRecord) -> None:
        self.seen.append(step)


def test_steps_feed_the_policy_with_reached_counts() -> None:
    c = KController(VLLM_LOOKUP, SHAPE)
    policy = Recording(3)
    c.install(LoadedTable("fixed", policy, (), "", "d"))
    c.step_done(2, 3, 0.02, [(3, 3), (3, 0)])
    (step,) = policy.seen
    assert (step.batch_size, step.k, step.step_seconds) == (2, 3, 0.02)
    assert (step.reached, step.proposed, step.accepted) == ([2, 1, 1], [2, 1, 1], [1, 1, 1])


def test_a_request_without_a_draft_counts_as_reached_and_rejected() -> None:
    """One definition: a missing draft is a rejection, so a_1 = 1/3 here, not 1/2."""
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    policy = Recording(3)
    c.install(LoadedTable("fixed", policy, (), "", "d"))
    reading = StepReading(3, ((3, 0, 0), (3, 3, 1), (3, 2, 0)), 1 + 4 + 3, 900)
    c.finish_step(3, 3, 0.05, reading)
    (step,) = policy.seen
    assert step == StepRecord(
        3, 3, 0.05, [3, 1, 0], [2, 1, 0], [1, 0, 0], 3, 8, 900, [2, 2, 1], [3, 3, 3]
    )
    assert (
        sample(metrics, "specdeploy_draft_positions_reached_total", pool="pool", position="1") == 3
    )
    assert sample(metrics, "specdeploy_draft_tokens_total", pool="pool", position="1") == 2
    assert sample(metrics, "specdeploy_accepted_tokens_total", pool="pool", position="1") == 1
    assert sample(metrics, "specdeploy_verified_tokens_total", pool="pool") == 8
    assert sample(metrics, "specdeploy_decode_sequence_steps_total", pool="pool") == 3


class Judging(Recording):
    """A policy that prices plain decoding (as ``AdaptivePolicy`` does with a baseline)."""

    def __init__(self, k: int, gain: float | None) -> None:
        super().__init__(k)
        self.gain = gain
        self.asked: list[int] = []

    def gain_over_vanilla(self, batch_size: int) -> float | None:
        self.asked.append(batch_size)
        return self.gain


@pytest.mark.parametrize("gain", [0.91, None])
def test_the_pod_exports_its_predicted_gain_over_plain_decoding(gain: float | None) -> None:
    """The live signal of the operator's floor, refreshed on the slow tick only."""
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    policy = Judging(3, gain)
    c.install(LoadedTable("fixed", policy, (), "", "d"))
    for _ in range(SLOW_TICK_STEPS - 1):
        c.step_done(5, 3, 0.02, [(3, 1)] * 5)
    assert policy.asked == []
    c.step_done(5, 3, 0.02, [(3, 1)] * 5)
    assert policy.asked == [5]
    value = metrics.registry.get_sample_value(
        "specdeploy_predicted_gain_over_vanilla", {"pool": "pool"}
    )
    assert value == gain


class Referencing(Recording):
    """A policy that has run ``plain_reference_steps`` K=0 steps (``AdaptivePolicy``'s
    plain reference)."""

    plain_reference_steps = 0


def test_the_pod_exports_its_plain_reference_steps_once_each() -> None:
    """What the policy counts goes out on the slow tick as a counter's increments."""
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    policy = Referencing(3)
    c.install(LoadedTable("fixed", policy, (), "", "d"))
    name = "specdeploy_plain_reference_steps_total"
    for referenced in (16, 32, 32):
        policy.plain_reference_steps = referenced
        for _ in range(SLOW_TICK_STEPS):
            c.step_done(5, 3, 0.02, [(3, 1)] * 5)
        assert sample(metrics, name, pool="pool") == referenced


def test_a_step_without_decoding_requests_is_observed_untimed_and_uncounted() -> None:
    c = KController(VLLM_LOOKUP, SHAPE)
    policy = Recording(3)
    c.install(LoadedTable("fixed", policy, (), "", "d"))
    c.finish_step(4, 2, None, NO_DECODE)
    assert policy.seen == [StepRecord(4, 2, None)]


def _drafting_controller(rate: float | None) -> tuple[KController, AddonMetrics]:
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    c.install(LoadedTable("table", TablePolicy(VLLM_LOOKUP), (), "", "d", drafting_rate=rate))
    return c, metrics


def _drafting_steps(c: KController, steps: int, proposing: int, of: int = 10) -> None:
    """``steps`` steps of ``of`` decoding requests at K=1, ``proposing`` of them with a draft."""
    requests = tuple((1, 1 if i < proposing else 0, 0) for i in range(of))
    for _ in range(steps):
        c.finish_step(of, 1, None, StepReading(1, requests, of + proposing, 0))


def test_a_drafting_rate_that_leaves_the_profiles_warns_once_per_state_and_is_exported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c, metrics = _drafting_controller(0.3)
    assert sample(metrics, "specdeploy_drafting_rate_profile", pool="pool") == 0.3
    window = DraftingRateWatch(None).window
    with caplog.at_level(logging.INFO, logger="specdeploy.addon"):
        _drafting_steps(c, window // 10, proposing=3)  # 0.3: within
        _drafting_steps(c, 3 * window // 10, proposing=1)  # 0.1 for three windows
        _drafting_steps(c, window // 10, proposing=3)  # back
    lines = [r for r in caplog.records if "drafting rate" in r.message]
    assert [r.levelname for r in lines] == ["WARNING", "INFO"]
    assert "0.100 is below the profile's 0.300" in lines[0].getMessage()
    assert sample(metrics, "specdeploy_drafting_rate", pool="pool") == pytest.approx(0.3)
    assert sample(metrics, "specdeploy_drafting_rate_drift", pool="pool") == 0
    windows = "specdeploy_drafting_rate_drift_windows_total"
    assert sample(metrics, windows, pool="pool", direction="below") == 3


def test_drafting_rate_noise_within_the_tolerance_is_no_drift() -> None:
    watch = DraftingRateWatch(0.3, window=100)
    assert watch.add(60, 20) is None
    verdict = watch.add(40, 15)  # 35/100 = 0.35: inside 0.10 (and 3 standard errors)
    assert verdict is not None and verdict.state is Drift.WITHIN and not verdict.changed
    assert watch.judge(0.55, 100) is Drift.ABOVE
    assert watch.judge(0.2, 10) is Drift.WITHIN  # 3 SE at n=10 is 0.43


def test_without_a_profile_drafting_rate_nothing_is_judged() -> None:
    c, metrics = _drafting_controller(None)
    _drafting_steps(c, 300, proposing=0)
    assert (
        metrics.registry.get_sample_value("specdeploy_drafting_rate_drift", {"pool": "pool"})
        is None
    )


def test_the_table_carries_the_profiles_drafting_rate_whatever_the_policy() -> None:
    profile = profile_spec()
    profile["acceptance"]["draftingRate"] = [0.25] * len(profile["acceptance"]["perPosition"])
    assert load(table_doc("table"), profile).drafting_rate == 0.25
    assert load(table_doc("adaptive"), profile).drafting_rate == 0.25
    assert load(table_doc("table"), {"not": "a profile"}).drafting_rate is None
    assert load(table_doc("table")).drafting_rate is None


def test_the_self_timer_exports_the_addons_share_per_bucket_and_part() -> None:
    timer = SelfTimer("pool")
    metrics = AddonMetrics("pool", 3)
    timer.register(metrics.registry)
    timer.pending_ns += 2_000
    timer.end_step(4, 1_000, 2_000, 1_000_000)
    timer.end_step(4, 3_000, 2_000, 1_000_000)
    timer.watcher_checked(7_000)
    assert timer.totals() == {2: ((2_000, 4_000, 4_000), 2_000_000, 2)}
    labels = {"pool": "pool", "batch_bucket": "3-4"}
    own = "specdeploy_addon_self_seconds_total"
    assert sample(metrics, own, part="read", **labels) == pytest.approx(4e-6)
    assert sample(metrics, own, part="schedule", **labels) == pytest.approx(2e-6)
    assert sample(metrics, "specdeploy_addon_step_wall_seconds_total", **labels) == pytest.approx(
        2e-3
    )
    assert sample(metrics, "specdeploy_addon_timed_steps_total", **labels) == 2
    assert sample(metrics, "specdeploy_addon_watcher_seconds_total", pool="pool") == pytest.approx(
        7e-6
    )


@pytest.mark.parametrize(("value", "on"), [("1", True), ("on", True), ("", False), ("0", False)])
def test_self_timing_is_off_unless_asked_for(value: str, on: bool) -> None:
    assert timing_requested({TIMING_ENV: value}) is on
    assert timing_requested({}) is False


def test_a_rejected_table_is_logged_once_per_reason_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    with caplog.at_level(logging.WARNING, logger="specdeploy.addon"):
        for reason in ("bad A", "bad A", "bad B"):
            c.rejected(reason)
    assert [r.message for r in caplog.records] == [
        "specdeploy: table rejected, keeping vLLM's own schedule: bad A",
        "specdeploy: table rejected, keeping vLLM's own schedule: bad B",
    ]
    assert sample(metrics, "specdeploy_table_reload_errors_total", pool="pool") == 3


# --- hot reload ------------------------------------------------------------------


def write_configmap(directory: Path, files: dict[str, bytes], version: int) -> None:
    """Write files the way the kubelet updates a ConfigMap volume: a ..data symlink swap."""
    target = directory / f"..v{version}"
    target.mkdir()
    for name, data in files.items():
        (target / name).write_bytes(data)
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(Path("..data") / name)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, directory / "..data")


def test_hot_reload_swaps_good_tables_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    table, profile = tmp_path / "table.json", tmp_path / "profile.json"
    watcher = TableWatcher(
        table,
        profile,
        lambda t, p: load_table(t, p, SHAPE, default_policy="table", adaptive=c_adaptive()),
        c.install,
        c.rejected,
        interval=60,
    )
    assert not watcher.check()  # missing: vLLM's own schedule, one error
    assert kind_in_force(c) is None and c.choose_k(1) == 3
    write_configmap(tmp_path, {"table.json": encode(table_doc("table"))}, 1)
    assert watcher.check() and c.choose_k(1) == 2
    write_configmap(tmp_path, {"table.json": b"{not json"}, 2)
    assert not watcher.check() and c.choose_k(1) == 2  # the last good table stays
    assert not watcher.check()  # unchanged bad file: not counted again
    doc = table_doc("adaptive")
    write_configmap(
        tmp_path, {"table.json": encode(doc), "profile.json": encode(profile_spec())}, 3
    )
    assert watcher.check() and c.table is not None and c.table.policy_kind == "adaptive"
    write_configmap(
        tmp_path, {"table.json": encode(doc), "profile.json": encode(profile_spec())}, 4
    )
    assert not watcher.check()  # same bytes, new inode: no reload, no reset of live state
    assert c.generation == 2
    assert sample(metrics, "specdeploy_table_reload_errors_total", pool="pool") == 2
    assert sample(metrics, "specdeploy_table_generation", pool="pool") == 2


def kind_in_force(c: KController) -> str | None:
    return None if c.table is None else c.table.policy_kind


def c_adaptive() -> Any:
    return AddonSettings().adaptive


def test_the_watcher_thread_picks_up_a_change(tmp_path: Path) -> None:
    settings = AddonSettings(
        table_file=tmp_path / "table.json", reload_seconds=0.05, allowed_k="all"
    )
    (tmp_path / "table.json").write_bytes(encode(table_doc("table")))
    addon = start_addon(settings, VLLM_LOOKUP, num_speculative_tokens=3)
    try:
        assert addon.controller.choose_k(1) == 2
        (tmp_path / "table.json").write_bytes(encode(table_doc("fixed", fixedK=1)))
        for _ in range(200):
            if addon.controller.generation == 2:
                break
            threading_sleep(0.02)
        assert addon.controller.choose_k(1) == 1
    finally:
        addon.close()


def threading_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


# --- assembly --------------------------------------------------------------------


def test_data_parallel_is_refused_unless_the_policy_is_off() -> None:
    with pytest.raises(AddonRefused, match="data_parallel_size=2"):
        start_addon(AddonSettings(), VLLM_LOOKUP, num_speculative_tokens=3, data_parallel_size=2)
    addon = start_addon(
        AddonSettings(policy="off"), VLLM_LOOKUP, num_speculative_tokens=3, data_parallel_size=2
    )
    assert addon.controller.choose_k(1) == 3


def test_the_engine_k_set_comes_from_vllms_lookup() -> None:
    addon = start_addon(AddonSettings(), VLLM_LOOKUP, num_speculative_tokens=3, watch=False)
    assert addon.controller.shape.allowed_k == (1, 3)
    assert addon.controller.shape.max_batch_size == 64


# --- metrics ---------------------------------------------------------------------


def sample(metrics: AddonMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, f"{name}{labels} not exported"
    return value


def test_batch_bucket_labels() -> None:
    assert [bucket_label(b) for b in (1, 2, 3, 4, 5, 16, 17)] == [
        "1",
        "2",
        "3-4",
        "3-4",
        "5-8",
        "9-16",
        "17-32",
    ]


def test_metrics_are_served_over_http_with_the_step_data(unused_port: int) -> None:
    metrics = AddonMetrics("NVIDIA-H200", 3)
    server = metrics.serve(unused_port, "127.0.0.1")
    try:
        metrics.step(2, StepRecord(6, 2, 0.03, [6, 3], [4, 3], [3, 1], 6, 13, 600))
        metrics.step(2, StepRecord(6, 2, None, [6, 0], [1, 0], [0, 0], 6, 7, 600))
        metrics.table_installed(1, "adaptive", "p-1", "abcdef0123456789")
        url = f"http://127.0.0.1:{unused_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
    assert 'specdeploy_steps_total{k="2",pool="NVIDIA-H200"} 2.0' in text
    assert 'specdeploy_draft_positions_reached_total{pool="NVIDIA-H200",position="1"} 12.0' in text
    assert 'specdeploy_draft_tokens_total{pool="NVIDIA-H200",position="1"} 5.0' in text
    assert 'specdeploy_verified_tokens_total{pool="NVIDIA-H200"} 20.0' in text
    assert 'specdeploy_accepted_tokens_total{pool="NVIDIA-H200",position="2"} 1.0' in text
    assert 'specdeploy_step_seconds_count{batch_bucket="5-8",k="2",pool="NVIDIA-H200"} 1.0' in text
    assert 'specdeploy_k{pool="NVIDIA-H200"} 2.0' in text
    assert (
        'specdeploy_table_info{digest="abcdef012345",policy="adaptive",pool="NVIDIA-H200",'
        'profile="p-1"} 1.0' in text
    )


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_readme_documents_every_setting_and_only_those() -> None:
    import re

    from specdeploy.runtime.contract import ENV_PREFIX, PodEnv
    from specdeploy.runtime.vllm_addon import settings

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The vLLM add-on", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(SPECDEPLOY_[A-Z_]+)`", section, flags=re.M))
    expected = {PodEnv(ENV_PREFIX + key.upper()).value for key in settings.KEYS}
    assert documented == expected
    assert "SPECDEPLOY_CONFIG_FILE" in section


def test_the_step_time_histogram_is_cumulative_with_prometheus_bucket_edges() -> None:
    metrics = AddonMetrics("pool", 2)
    for seconds in (0.01, 0.015, 0.02, 9.0):  # 0.01 and 0.02 are bucket edges: le includes them
        metrics.step(1, StepRecord(3, 1, seconds, [3], [1], [1], 3, 4, 0))
    labels = {"pool": "pool", "batch_bucket": "3-4", "k": "1"}
    bucket = "specdeploy_step_seconds_bucket"
    assert sample(metrics, bucket, le="0.005", **labels) == 0
    assert sample(metrics, bucket, le="0.01", **labels) == 1
    assert sample(metrics, bucket, le="0.02", **labels) == 3
    assert sample(metrics, bucket, le="5.12", **labels) == 3
    assert sample(metrics, bucket, le="+Inf", **labels) == 4
    assert sample(metrics, "specdeploy_step_seconds_count", **labels) == 4
    assert sample(metrics, "specdeploy_step_seconds_sum", **labels) == pytest.approx(9.045)
    assert sample(metrics, "specdeploy_steps_total", pool="pool", k="1") == 4
    assert sample(metrics, "specdeploy_batch_size", pool="pool") == 3


def test_each_step_time_cell_counts_its_steps_batch_sizes_so_their_mean_is_known() -> None:
    """The operator's served mix places a cell's steps at their mean batch size (not spread
    over the bucket): the sizes summed beside the histogram's count, untimed steps left out."""
    metrics = AddonMetrics("pool", 2)
    for batch_size, seconds in ((3, 0.01), (4, 0.01), (4, 0.01), (4, None)):
        metrics.step(1, StepRecord(batch_size, 1, seconds, [3], [1], [1], 3, 4, 0))
    labels = {"pool": "pool", "batch_bucket": "3-4", "k": "1"}
    assert sample(metrics, "specdeploy_step_batch_sizes_total", **labels) == 11
    assert sample(metrics, "specdeploy_step_seconds_count", **labels) == 3
    assert sample(metrics, "specdeploy_step_seconds_sum", **labels) == pytest.approx(0.03)


def test_the_profiles_acceptance_is_exported_per_position_while_its_table_is_in_force() -> None:
    metrics = AddonMetrics("pool", 3)
    c = KController(VLLM_LOOKUP, SHAPE, metrics)
    with_profile = load(table_doc("table"), profile_spec())
    c.install(with_profile)
    exported = [
        sample(metrics, "specdeploy_acceptance_profile", pool="pool", position=str(i))
        for i in (1, 2, 3)
    ]
    c.install(load(table_doc("table")))  # a table without a profile: nothing to compare with

    assert with_profile.acceptance == tuple(profile_spec()["acceptance"]["perPosition"])
    assert exported == list(with_profile.acceptance)
    left = metrics.registry.get_sample_value(
        "specdeploy_acceptance_profile", {"pool": "pool", "position": "1"}
    )
    assert left is None


def test_reload_errors_are_exported_at_zero_before_the_first_rejected_file() -> None:
    metrics = AddonMetrics("pool", 3)

    assert sample(metrics, "specdeploy_table_reload_errors_total", pool="pool") == 0
    metrics.reload_failed()
    assert sample(metrics, "specdeploy_table_reload_errors_total", pool="pool") == 1
