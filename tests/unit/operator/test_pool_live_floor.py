"""The live floor: plain decoding on sustained live evidence, a timed probe back, a flip budget.

Each test runs the operator's own decision (``decide``) over windows built
the way the add-on counts: the H100 pool serves at batch 3-4 with the
example profile plus a measured plain-decoding baseline 8% below K=0's
step time, so a collapse of acceptance (random text) makes speculation
lose and the profile's acceptance makes it win.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest

from specdeploy.operator.api import FloorState, PoolFloor
from specdeploy.operator.config import Config, FloorSettings
from specdeploy.operator.decision.decide import Decision
from specdeploy.operator.telemetry.window import StepTimes
from tests.unit.operator.telemetry.fakes import (
    NOW,
    PROFILE_RATES,
    body,
    condition,
    owned,
    pool,
    profile_doc,
    report,
    settle,
    step,
    window,
)

pytestmark = pytest.mark.unit

K0_TAX = 1.08
COLLAPSED = (0.02, 0.01, 0.0, 0.0, 0.0)
QUICK = Config(floor=FloorSettings(restart_seconds=6.0))
"""A restart of 6 s: a 30%+ loss pays for it within the three-window streak."""


def profile_with_baseline(deployment: dict[str, Any]) -> dict[str, Any]:
    doc = profile_doc(deployment)
    doc["spec"]["baseline"] = [
        {"batchSize": c["batchSize"], "itlMs": round(c["itlMs"] / K0_TAX, 4), "samples": 256}
        for c in doc["spec"]["measurements"]
        if c["k"] == 0
    ]
    return doc


def at(minutes: float) -> str:
    start = datetime.datetime.fromisoformat(NOW)
    return (start + datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pool:
    """One pool reconciled window after window, as the telemetry loop would drive it."""

    def __init__(self, config: Config = QUICK, **spec: Any) -> None:
        deployment = body(**spec)
        self.profile = profile_with_baseline(deployment)
        self.config = config
        self.body, self.decision = settle(deployment, config=config, profile=self.profile)

    def window(
        self, minute: float, rates: tuple[float, ...] | None, k: int = 5, ab: float | None = None
    ) -> Decision:
        """A reconcile at ``minute`` with a window at ``rates`` whose steps ran at ``k`` (None:
        no window this time); ``ab``: a plain reference pod served beside the pool, at this
        time per output token over the speculating pods' (40 requests each)."""
        telemetry = None
        if rates is not None:
            win = window(rates, k=k, deployment=self.body)
            if ab is not None:
                win = dataclasses.replace(
                    win, tpot=StepTimes(0.4, 40.0), reference_tpot=StepTimes(0.4 * ab, 40.0)
                )
            telemetry = report(win)
        self.body, self.decision = step(
            self.body,
            self.decision,
            telemetry,
            now=at(minute),
            profile=self.profile,
            config=self.config,
        )
        return self.decision

    def floor(self) -> PoolFloor | None:
        raw = pool(self.decision).get("floor")
        return None if raw is None else PoolFloor.model_validate(raw)

    def speculating(self) -> bool:
        containers = owned(self.decision, "Deployment")["spec"]["template"]["spec"]["containers"]
        args = json.dumps([c.get("args", []) + c.get("command", []) for c in containers])
        return "--speculative-config" in args


def test_collapse_rolls_the_pool_to_plain_decoding_after_the_losing_windows() -> None:
    p = Pool()
    assert p.speculating() and p.floor() is None  # nothing judged before the first window
    for minute in (1, 2):
        p.window(minute, COLLAPSED)
        assert p.speculating(), minute
        floor = p.floor()
        assert floor is not None and floor.state is FloorState.SPECULATING
        assert floor.losing_windows == minute
        assert floor.ratio_high is not None and floor.ratio_high < 0.98
    p.window(3, COLLAPSED)
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.PLAIN, floor
    assert not p.speculating()
    status = pool(p.decision)
    assert status["speculating"] is False
    assert "plain decoding (live floor)" in status["message"]
    assert floor.flips == (at(3),) and floor.since == at(3)
    beneficial = condition(p.decision, "SpeculationBeneficial")
    assert (beneficial["status"], beneficial["reason"]) == ("False", "LiveFloorPlain")
    assert any(e.reason == "PlainDecoding" for e in p.decision.events)
    # no window from a plain pool (its pods run no add-on): it stays plain, nothing rewritten
    p.window(4, None)  # the rollout to plain decoding is done
    before = p.decision.status
    p.window(5, None)
    assert not p.speculating() and p.floor() == floor and p.decision.status == before


def test_traffic_the_table_wins_on_starts_no_streak_and_writes_nothing_when_quiet() -> None:
    p = Pool()
    p.window(1, PROFILE_RATES)
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.SPECULATING
    assert floor.losing_windows == 0 and floor.ratio_low is not None and floor.ratio_low > 1.0
    status = p.decision.status
    p.window(2, PROFILE_RATES)
    assert p.decision.status == status  # the same R again: nothing to write


def test_a_window_that_wins_breaks_the_streak() -> None:
    p = Pool()
    p.window(1, COLLAPSED)
    p.window(2, COLLAPSED)
    p.window(3, PROFILE_RATES)
    p.window(4, COLLAPSED)
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.SPECULATING
    assert floor.losing_windows == 1 and p.speculating()


def test_a_loss_too_small_to_pay_for_a_restart_waits_for_the_break_even() -> None:
    """Under random text the add-on runs K=0, which loses only the K=0 tax (~7%): with a
    4 min restart, the streak must last about 4 / 0.07 min before a flip pays. Nothing is
    proposed at K=0, so acceptance is unobserved (the profile's prior): R is still the tax,
    because it prices the K that ran."""
    p = Pool(config=Config(floor=FloorSettings(restart_seconds=240.0)))
    for minute in range(1, 30):
        p.window(minute, COLLAPSED, k=0)
        assert p.speculating(), minute
    floor = p.floor()
    assert floor is not None and "a restart pays after" in floor.reason
    assert floor.ratio is not None and 0.9 < floor.ratio < 0.95  # about 1 / K0_TAX
    expected = 240.0 / (1.0 - floor.ratio) / 60.0
    minute = 30
    while p.speculating() and minute < 120:
        minute += 1
        p.window(minute, COLLAPSED, k=0)
    # the streak began with the first window (minute 0 to 1)
    assert not p.speculating() and expected <= minute <= expected + 1, (minute, expected)


def test_a_timed_probe_speculates_again_and_the_flip_budget_bounds_round_trips() -> None:
    p = Pool(config=Config(floor=FloorSettings(restart_seconds=6.0, probe_after_seconds=1800)))
    for minute in (1, 2, 3):
        p.window(minute, COLLAPSED)
    assert not p.speculating()  # flip 1 at minute 3
    p.window(32, None)
    assert not p.speculating()  # 29 min of plain decoding: no probe yet
    p.window(33, None)
    assert p.speculating()  # flip 2: the probe
    floor = p.floor()
    assert floor is not None and floor.flips == (at(3), at(33)) and "probe" in floor.reason
    assert any(e.reason == "SpeculationResumed" for e in p.decision.events)
    for minute in range(34, 63):  # still random text: losing, but two flips this hour
        p.window(minute, COLLAPSED)
        assert p.speculating(), minute
    floor = p.floor()
    assert floor is not None and "2 flips in the last hour" in floor.reason
    p.window(63, COLLAPSED)  # minute 3's flip leaves the hour: flip 3
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.PLAIN
    assert not p.speculating() and floor.flips == (at(33), at(63))


def test_oscillating_traffic_makes_at_most_two_flips_an_hour() -> None:
    p = Pool(config=Config(floor=FloorSettings(restart_seconds=6.0, probe_after_seconds=600.0)))
    flips: list[int] = []
    was = p.speculating()
    for minute in range(1, 121):
        hostile = (minute // 10) % 2 == 0  # ten minutes of random text, ten of chat
        p.window(minute, COLLAPSED if hostile else PROFILE_RATES)
        if p.speculating() != was:
            flips.append(minute)
            was = p.speculating()
    assert len(flips) >= 3, f"the floor barely acted on an hour of random text: {flips}"
    for first in flips:
        assert sum(1 for t in flips if first <= t < first + 60) <= 2, flips


def test_fallback_none_speculates_whatever_the_traffic() -> None:
    p = Pool(speculation={**body()["spec"]["speculation"], "fallback": "none"})
    for minute in range(1, 10):
        p.window(minute, COLLAPSED)
    assert p.speculating() and p.floor() is None


def deployments(decision: Decision) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in decision.owned if m["kind"] == "Deployment"}


def speculates(deployment: dict[str, Any]) -> bool:
    return "--speculative-config" in json.dumps(deployment["spec"]["template"])


def test_a_plain_pool_keeps_one_surged_canary_speculating_on_the_pools_table() -> None:
    p = Pool()
    assert len(deployments(p.decision)) == 1
    for minute in (1, 2, 3):
        p.window(minute, COLLAPSED)
    found = deployments(p.decision)
    (main,) = (d for name, d in found.items() if not name.endswith("-canary"))
    (canary,) = (d for name, d in found.items() if name.endswith("-canary"))
    assert not speculates(main) and speculates(canary)
    assert canary["spec"]["replicas"] == 1 and main["spec"]["replicas"] == 1  # surged beside it
    selector = canary["spec"]["selector"]["matchLabels"]
    assert selector["specdeploy.io/canary"] == "true"
    assert {k: v for k, v in selector.items() if k != "specdeploy.io/canary"} == (
        main["spec"]["selector"]["matchLabels"]
    )
    table = json.loads(owned(p.decision, "ConfigMap")["data"]["table.json"])
    assert table["policy"] != "off" and table["schedule"]  # what the canary's add-on reads


def test_the_canarys_wins_bring_the_pool_back_and_its_losses_keep_it_plain_without_probes() -> None:
    p = Pool()
    for minute in (1, 2, 3):
        p.window(minute, COLLAPSED)
    writes = 0
    for minute in range(4, 80):  # random text goes on: the canary loses, no probe after 1 h
        status = p.decision.status
        p.window(minute, COLLAPSED)
        writes += p.decision.status != status
        assert not p.speculating(), minute
    # the canary's clock is refreshed every quarter of the probe's hour, not every window
    assert writes <= 6, writes
    floor = p.floor()
    assert floor is not None and floor.flips == () and floor.winning_windows == 0
    for minute in (80, 81):  # chat again
        p.window(minute, PROFILE_RATES)
        assert not p.speculating(), minute
    p.window(82, PROFILE_RATES)
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.SPECULATING, floor
    assert p.speculating() and list(deployments(p.decision)) == [
        n for n in deployments(p.decision) if not n.endswith("-canary")
    ]
    assert "canary" in floor.reason and floor.flips == (at(82),)


def test_the_operators_flags_set_the_floors_restart_and_probe_and_default_to_its_settings() -> None:
    from specdeploy.cli import operator as cli
    from specdeploy.operator.config import DEFAULT_FLOOR

    assert DEFAULT_FLOOR.restart_seconds == cli.DEFAULT_FLOOR_RESTART_S
    assert DEFAULT_FLOOR.probe_after_seconds == cli.DEFAULT_FLOOR_PROBE_S
    import argparse

    parser = argparse.ArgumentParser()
    cli._floor_arguments(parser)
    args = parser.parse_args(["--floor-restart-seconds=40s", "--floor-probe-after-seconds", "900"])
    assert (args.floor_restart_seconds, args.floor_probe_after_seconds) == (40.0, 900.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--floor-restart-seconds=0"])


UNDECIDED = tuple(c + 0.22 * (p - c) for p, c in zip(PROFILE_RATES, COLLAPSED, strict=True))
"""Acceptance at which R's interval spans 1 +- 2%: the profile cannot tell."""


def reference_deployment(decision: Decision) -> dict[str, Any] | None:
    found = [
        m
        for m in decision.owned
        if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("-reference")
    ]
    return found[0] if found else None


def test_an_undecided_r_brings_a_plain_reference_whose_a_b_finds_the_loss() -> None:
    p = Pool()
    for minute in (1, 2, 3, 4):  # three windows, but not yet five minutes: a shift passing
        p.window(minute / 2, UNDECIDED)
        floor = p.floor()
        assert floor is not None and floor.undecided_windows == min(minute, 3), floor
        assert reference_deployment(p.decision) is None
    p.window(3, UNDECIDED)
    assert reference_deployment(p.decision) is None, "undecided since minute 0, for 3 min"
    p.window(5, UNDECIDED)
    floor = p.floor()
    assert floor is not None and floor.reference_since == at(5), floor
    assert floor.undecided_since == at(-0.5)
    ref = reference_deployment(p.decision)
    assert ref is not None and p.speculating()
    assert any(e.reason == "PlainReference" for e in p.decision.events)
    assert ref["spec"]["replicas"] == 1
    assert ref["metadata"]["labels"]["specdeploy.io/plain-reference"] == "true"
    assert "--speculative-config" not in json.dumps(ref["spec"]["template"])
    # the A/B: speculation 2% slower, give or take 0.5%; five windows before it counts
    spread = (0.975, 0.985, 0.98, 0.976, 0.984)
    for minute, ab in zip(range(6, 10), spread, strict=False):
        p.window(minute, UNDECIDED, ab=ab)
        floor = p.floor()
        assert floor is not None and floor.losing_windows == 0, (minute, floor)
    p.window(10, UNDECIDED, ab=spread[4])
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.SPECULATING
    assert floor.losing_windows == 1 and floor.ratio_high is not None and floor.ratio_high < 0.995
    assert floor.losing_since == at(-0.5), "the regime's age counts from the undecided windows"
    assert "plain reference A/B" in floor.reason
    for minute in (11, 12):
        p.window(minute, UNDECIDED, ab=0.98)
    floor = p.floor()
    assert floor is not None and floor.state is FloorState.PLAIN, floor
    assert not p.speculating() and reference_deployment(p.decision) is None
    assert floor.reference_since is None and floor.reference_ratios == ()


def test_a_plain_reference_that_finds_speculation_winning_ends_and_waits_before_the_next() -> None:
    p = Pool()
    for minute in (1, 3, 5):
        p.window(minute, UNDECIDED)
    for minute in range(4, 9):
        p.window(minute + 2, UNDECIDED, ab=1.04 + 0.002 * (minute % 2))
    floor = p.floor()
    assert floor is not None and floor.reference_since is None, floor
    assert floor.reference_ended_at == at(10) and floor.undecided_windows == 0
    assert reference_deployment(p.decision) is None and p.speculating()
    assert any(e.reason == "PlainReferenceEnded" for e in p.decision.events)
    for minute in range(11, 20):  # undecided again, within the hold-off: no new reference
        p.window(minute, UNDECIDED)
    floor = p.floor()
    assert floor is not None and floor.reference_since is None and floor.undecided_windows == 3
    status = p.decision.status
    p.window(20, UNDECIDED)
    assert p.decision.status == status, "an undecided pool in the hold-off writes nothing"


def test_a_plain_reference_that_never_reports_ends_after_its_hour() -> None:
    p = Pool()
    for minute in (1, 3, 5):
        p.window(minute, UNDECIDED)
    assert reference_deployment(p.decision) is not None
    p.window(64, UNDECIDED)  # no A/B window at all: its pod never served (no spare GPU)
    assert reference_deployment(p.decision) is not None
    p.window(65, UNDECIDED)
    floor = p.floor()
    assert floor is not None and floor.reference_since is None
    assert floor.reference_ended_at == at(65)
    assert reference_deployment(p.decision) is None
