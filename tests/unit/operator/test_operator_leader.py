"""Leader election over a Lease: who leads, when a standby takes over, when a leader stops.

The API is an in-memory Lease store with the API server's optimistic lock
(a PUT with a stale ``resourceVersion``, or a POST of an existing name, is
409) and hooks that let a test interleave two candidates; the clock is a
fake one the test moves. The raw transport explodes (``no_network``).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from specdeploy.cli import build_parser
from specdeploy.cli import operator as cli_operator
from specdeploy.operator import main
from specdeploy.operator.builders.rbac import (
    leader_election_rules,
    operator_cluster_role,
    operator_namespaced_roles,
)
from specdeploy.operator.clients import k8s
from specdeploy.operator.naming import OPERATOR_LEASE
from specdeploy.operator.reactor import leader
from specdeploy.operator.reactor.leader import (
    EXIT_LOST,
    LEASE_USER_AGENT,
    LeaderElector,
    Leadership,
    Timing,
    acquire,
    lease_namespace,
)
from specdeploy.operator.reactor.metrics import OperatorMetrics
from specdeploy.operator.reactor.standby import StandbyProbe
from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.client import Unreachable
from tests.unit.operator.test_operator_k8s import no_network

pytestmark = pytest.mark.unit
__all__ = ["no_network"]

Obj = dict[str, Any]
NS = "specdeploy-system"
LEASE = paths.path("Lease", NS, OPERATOR_LEASE)
COLLECTION = paths.path("Lease", NS)


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class LeaseStore:
    """The API server's side of one Lease: GET, POST, PUT with the optimistic lock.

    ``before`` runs before a request is answered (to let another candidate
    write first); ``fail`` makes requests raise (an outage, a refusal).
    """

    def __init__(self) -> None:
        self.lease: Obj | None = None
        self.requests: list[tuple[str, str]] = []
        self.before: Callable[[str, str], None] | None = None
        self.fail: Exception | None = None
        self._rv = itertools.count(1)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Any = (),
    ) -> Obj:
        self.requests.append((method, path))
        if self.before is not None:
            hook, self.before = self.before, None
            hook(method, path)
        if self.fail is not None:
            raise self.fail
        if method == "GET" and path == LEASE:
            if self.lease is None:
                raise k8s.ApiError(method, path, 404, '{"reason": "NotFound"}')
            return copy.deepcopy(self.lease)
        if method == "POST" and path == COLLECTION:
            if self.lease is not None:
                raise k8s.ApiError(method, path, 409, '{"reason": "AlreadyExists"}')
            return self._store(body)
        if method == "PUT" and path == LEASE:
            assert self.lease is not None, "an update of a Lease that does not exist"
            sent = body["metadata"].get("resourceVersion")
            if sent != self.lease["metadata"]["resourceVersion"]:
                raise k8s.ApiError(method, path, 409, '{"reason": "Conflict"}')
            return self._store(body)
        raise AssertionError(f"unexpected request {method} {path}")

    def _store(self, body: Obj) -> Obj:
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        self.lease = stored
        return copy.deepcopy(stored)

    @property
    def spec(self) -> Obj:
        assert self.lease is not None
        spec: Obj = self.lease["spec"]
        return spec


def candidate(
    store: LeaseStore,
    clock: Clock,
    identity: str,
    *,
    timing: Timing | None = None,
    wall: Callable[[], datetime] | None = None,
) -> LeaderElector:
    return LeaderElector(
        store,
        namespace=NS,
        identity=identity,
        timing=timing,
        monotonic=clock,
        now=wall or (lambda: datetime(2025, 1, 1, tzinfo=UTC)),
    )


@pytest.fixture
def store() -> LeaseStore:
    return LeaseStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --- acquiring ------------------------------------------------------------------------


def test_the_first_candidate_creates_the_lease_and_leads(store: LeaseStore, clock: Clock) -> None:
    a = candidate(store, clock, "a")

    assert a.try_acquire_or_renew()

    assert a.is_leader and a.holder == "a"
    assert store.requests == [("GET", LEASE), ("POST", COLLECTION)]
    assert store.spec["holderIdentity"] == "a"
    assert store.spec["leaseDurationSeconds"] == 15
    assert store.spec["leaseTransitions"] == 0
    assert store.spec["renewTime"] == "2025-01-01T00:00:00.000000Z"  # a MicroTime


def test_a_second_candidate_stands_by_while_the_leader_renews(
    store: LeaseStore, clock: Clock
) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    assert a.try_acquire_or_renew()

    for _ in range(20):  # 40 s: far beyond a lease duration, renewed all along
        clock.advance(2)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()

    assert store.spec["holderIdentity"] == "a" and not b.is_leader


def test_a_standby_takes_over_once_the_lease_is_unchanged_for_its_duration(
    store: LeaseStore, clock: Clock
) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b sees a's lease now

    clock.advance(14.9)  # a is gone (killed): the lease stops changing
    assert not b.try_acquire_or_renew()
    clock.advance(0.1)
    assert b.try_acquire_or_renew()

    assert store.spec["holderIdentity"] == "b"
    assert store.spec["leaseTransitions"] == 1


def test_expiry_is_judged_on_the_candidates_clock_not_the_lease_renew_time(
    store: LeaseStore, clock: Clock
) -> None:
    """A leader whose wall clock is an hour behind still holds its lease: renewTime is
    never compared across hosts, only whether the lease changed."""
    hour_behind = lambda: datetime(2025, 1, 1, tzinfo=UTC) - timedelta(hours=1)  # noqa: E731
    a = candidate(store, clock, "a", wall=hour_behind)
    b = candidate(store, clock, "b")
    assert a.try_acquire_or_renew()

    assert not b.try_acquire_or_renew()
    clock.advance(10)
    assert not b.try_acquire_or_renew()


def test_a_new_candidate_waits_a_full_duration_even_for_a_long_dead_leader(
    store: LeaseStore, clock: Clock
) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    clock.advance(3600)  # a died an hour ago; c starts now and cannot know that
    c = candidate(store, clock, "c")

    assert not c.try_acquire_or_renew()
    clock.advance(15)
    assert c.try_acquire_or_renew()


def between_read_and_write(store: LeaseStore, other: LeaderElector) -> None:
    """``other`` takes its turn after the next request (a read) and before the one after."""

    def after_the_read(_method: str, _path: str) -> None:
        store.before = lambda _m, _p: assert_leads(other)

    store.before = after_the_read


def assert_leads(elector: LeaderElector) -> None:
    assert elector.try_acquire_or_renew()


def test_of_two_candidates_racing_for_an_expired_lease_one_wins(
    store: LeaseStore, clock: Clock
) -> None:
    a, b, c = (candidate(store, clock, x) for x in "abc")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.advance(15)  # a is gone; b and c both see its lease expired

    between_read_and_write(store, b)  # c reads, b updates, then c's update arrives
    assert not c.try_acquire_or_renew()  # stale resourceVersion: 409

    assert store.spec["holderIdentity"] == "b" and b.is_leader and not c.is_leader
    assert store.spec["leaseTransitions"] == 1


def test_of_two_candidates_creating_the_lease_one_wins(store: LeaseStore, clock: Clock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")

    between_read_and_write(store, a)  # b reads 404, a creates it, then b's create arrives
    assert not b.try_acquire_or_renew()  # 409 AlreadyExists

    assert store.spec["holderIdentity"] == "a" and a.is_leader and not b.is_leader


# --- renewing -------------------------------------------------------------------------


def test_a_leader_renews_with_one_update_and_keeps_its_acquire_time(
    store: LeaseStore, clock: Clock
) -> None:
    times = iter(datetime(2025, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(10))
    a = candidate(store, clock, "a", wall=lambda: next(times))
    assert a.try_acquire_or_renew()
    store.requests.clear()

    clock.advance(2)
    assert a.try_acquire_or_renew()

    assert store.requests == [("PUT", LEASE)]
    assert store.spec["acquireTime"] == "2025-01-01T00:00:00.000000Z"
    assert store.spec["renewTime"] == "2025-01-01T00:00:01.000000Z"
    assert store.spec["leaseTransitions"] == 0


def test_a_leader_whose_update_conflicts_reads_again_and_renews(
    store: LeaseStore, clock: Clock
) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    assert store.lease is not None
    store.lease["metadata"]["resourceVersion"] = "999"  # someone edited a label meanwhile

    assert a.try_acquire_or_renew()

    assert [m for m, _ in store.requests[-3:]] == ["PUT", "GET", "PUT"]
    assert a.is_leader


def test_a_leader_that_sees_another_holder_has_lost_and_says_to_whom(
    store: LeaseStore, clock: Clock
) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    assert store.lease is not None
    store.lease["spec"]["holderIdentity"] = "b"  # b judged a expired and took it
    store.lease["metadata"]["resourceVersion"] = "999"

    reason = Leadership(a, on_lost=pytest.fail).step()

    assert not a.is_leader and a.lost_to == "b"
    assert reason is not None and "held by b" in reason
    assert store.spec["holderIdentity"] == "b"  # a did not take it back


@pytest.mark.parametrize(
    "failure",
    [
        Unreachable("connection refused"),
        k8s.ApiError("PUT", LEASE, 500, "etcdserver: request timed out"),
        k8s.ApiError("PUT", LEASE, 403, '{"reason": "Forbidden"}'),
    ],
    ids=["unreachable", "server-error", "forbidden"],
)
def test_a_leader_that_cannot_renew_stops_after_the_renew_deadline_not_before(
    store: LeaseStore, clock: Clock, failure: Exception
) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    leadership = Leadership(a, on_lost=pytest.fail)
    store.fail = failure

    for _ in range(5):  # 10 s of failed renewals: still within the deadline
        clock.advance(2)
        assert leadership.step() is None
    clock.advance(0.1)

    reason = leadership.step()
    assert reason is not None and "renew deadline (10 s)" in reason
    assert a.renew_overdue()


def test_a_renewal_that_succeeds_again_in_time_keeps_the_lead(
    store: LeaseStore, clock: Clock
) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    leadership = Leadership(a, on_lost=pytest.fail)
    store.fail = Unreachable("blip")
    for _ in range(4):
        clock.advance(2)
        assert leadership.step() is None
    store.fail = None
    clock.advance(2)
    assert leadership.step() is None

    clock.advance(9)
    assert not a.renew_overdue()


# --- releasing ------------------------------------------------------------------------


def test_a_released_lease_is_taken_by_a_standby_at_once(store: LeaseStore, clock: Clock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()

    assert a.release()

    assert "holderIdentity" not in store.spec and store.spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()  # no waiting for a lease duration
    assert store.spec["holderIdentity"] == "b"


def test_after_a_release_no_step_writes_again(store: LeaseStore, clock: Clock) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    assert a.release()
    sent = len(store.requests)

    clock.advance(2)
    assert not a.try_acquire_or_renew()
    assert len(store.requests) == sent and not a.is_leader


def test_a_standby_releases_nothing(store: LeaseStore, clock: Clock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    sent = len(store.requests)

    assert not b.release()
    assert len(store.requests) == sent and store.spec["holderIdentity"] == "a"


def test_a_failed_release_is_reported_not_raised(store: LeaseStore, clock: Clock) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    store.fail = Unreachable("gone")

    assert not a.release()
    assert not a.is_leader


# --- the loops ------------------------------------------------------------------------


def test_acquire_retries_every_jittered_period_until_it_leads(
    store: LeaseStore, clock: Clock
) -> None:
    holder = candidate(store, clock, "holder")
    assert holder.try_acquire_or_renew()  # then never renews: it died
    standby = candidate(store, clock, "standby")
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        clock.advance(seconds)

    assert acquire(standby, stopped=lambda: False, sleep=sleep, fraction=lambda: 0.5)

    assert standby.is_leader
    assert 15 <= sum(naps) <= 15 + 3.2  # one lease duration, plus at most one period
    assert max(naps) <= 0.2  # short naps: a stop request is seen quickly


def test_acquire_returns_false_when_stopped_while_standing_by(
    store: LeaseStore, clock: Clock
) -> None:
    assert candidate(store, clock, "holder").try_acquire_or_renew()
    standby = candidate(store, clock, "standby")
    calls = itertools.count()

    assert not acquire(standby, stopped=lambda: next(calls) > 3, sleep=clock.advance)
    assert not standby.is_leader


def test_the_deadline_watch_stops_a_leader_whose_renewal_hangs(
    store: LeaseStore, clock: Clock
) -> None:
    """Real threads, short timings: the renewer is stuck inside a request, and the
    watch still calls on_lost once the deadline has passed."""
    timing = Timing(lease_duration=2, renew_deadline=0.6, retry_period=0.1)
    a = LeaderElector(store, namespace=NS, identity="a", timing=timing)
    assert a.try_acquire_or_renew()
    stuck = threading.Event()

    def hang(_method: str, _path: str) -> None:
        stuck.wait(10)

    store.before = hang
    lost: list[tuple[str, float]] = []
    started = time.monotonic()

    with Leadership(a, on_lost=lambda why: lost.append((why, time.monotonic())), watch_period=0.02):
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.02)
        stuck.set()

    assert len(lost) == 1
    why, at = lost[0]
    assert "renew deadline" in why
    assert at - started >= 0.6


def test_a_stopped_leadership_reports_no_loss(store: LeaseStore, clock: Clock) -> None:
    timing = Timing(lease_duration=2, renew_deadline=0.6, retry_period=0.1)
    a = LeaderElector(store, namespace=NS, identity="a", timing=timing)
    assert a.try_acquire_or_renew()
    lost: list[str] = []

    with Leadership(a, on_lost=lost.append, watch_period=0.02):
        time.sleep(0.35)  # a few renewals
    renewals = sum(1 for m, _ in store.requests if m == "PUT")
    a.release()
    time.sleep(0.7)  # past the deadline: the watch is gone, it says nothing

    assert lost == [] and renewals >= 2


def test_losing_the_lead_exits_with_its_own_status(monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)

    leader.exit_lost("could not renew")

    assert exits == [EXIT_LOST]


# --- settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "problem"),
    [
        (10, 10.0, 2.0, "lease duration (10) must be greater than the renew deadline"),
        (15, 2.0, 2.0, "renew deadline (2.0) must be greater than 1.2 x the retry period"),
        (15, 10.0, 0.0, "retry period must be > 0"),
        (0, 10.0, 2.0, "lease duration must be > 0"),
    ],
    ids=["lease-not-longer-than-deadline", "deadline-within-jitter", "no-retry", "no-lease"],
)
def test_inconsistent_timings_are_refused_by_name(
    lease: int, renew: float, retry: float, problem: str
) -> None:
    with pytest.raises(ValueError) as refused:
        Timing(lease_duration=lease, renew_deadline=renew, retry_period=retry)
    assert str(refused.value).startswith("leader election: ")
    assert problem in str(refused.value)


def test_the_defaults_are_client_gos() -> None:
    assert Timing() == Timing(lease_duration=15, renew_deadline=10.0, retry_period=2.0)


@pytest.mark.parametrize(
    ("flag", "watched", "env", "client", "expected"),
    [
        ("ops", ("team-a",), {"POD_NAMESPACE": "pod-ns"}, "sa-ns", "ops"),
        (None, ("team-a",), {"POD_NAMESPACE": "pod-ns"}, "sa-ns", "team-a"),
        (None, ("team-a", "team-b"), {"POD_NAMESPACE": "pod-ns"}, "sa-ns", "pod-ns"),
        (None, (), {"POD_NAMESPACE": "pod-ns"}, "sa-ns", "pod-ns"),
        (None, (), {}, "sa-ns", "sa-ns"),
        (None, (), {"POD_NAMESPACE": " "}, None, "default"),
    ],
    ids=[
        "flag",
        "namespaced-mode",
        "several-watched",
        "downward-api",
        "service-account-or-context",
        "default",
    ],
)
def test_the_lease_namespace_is_the_flag_the_watched_one_the_operators_own_or_default(
    flag: str | None,
    watched: tuple[str, ...],
    env: dict[str, str],
    client: str | None,
    expected: str,
) -> None:
    found = lease_namespace(flag, watched=watched, env=env, client_namespace=client)
    assert found == expected


def test_identities_differ_between_processes_on_one_host() -> None:
    first, second = leader.default_identity(), leader.default_identity()
    assert first != second
    assert first.split("_")[:2] == second.split("_")[:2]  # hostname and pid


# --- liveness while standing by -------------------------------------------------------


def test_a_standby_answers_the_liveness_path_and_only_it(store: LeaseStore, clock: Clock) -> None:
    assert candidate(store, clock, "holder").try_acquire_or_renew()
    standby = candidate(store, clock, "standby")
    assert not standby.try_acquire_or_renew()

    with StandbyProbe("http://127.0.0.1:0/healthz", standby) as probe:
        base = f"http://127.0.0.1:{probe.port}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert answer.status == 200
            assert json.loads(answer.read()) == {"standby": True, "holder": "holder"}
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/other", timeout=5)
        assert missing.value.code == 404


def test_a_standby_probe_refuses_what_kopf_would_not_serve(store: LeaseStore, clock: Clock) -> None:
    with pytest.raises(ValueError, match="only http://"):
        StandbyProbe("https://127.0.0.1:0/healthz", candidate(store, clock, "x"))


# --- RBAC -----------------------------------------------------------------------------


def test_the_lease_rules_name_the_lease_for_everything_but_create() -> None:
    rules = leader_election_rules("my-lease")

    by_verb = {verb: rule for rule in rules for verb in rule["verbs"]}
    assert set(by_verb) == {"create", "get", "update"}
    assert "resourceNames" not in by_verb["create"]  # RBAC cannot name what does not exist
    assert by_verb["get"]["resourceNames"] == by_verb["update"]["resourceNames"] == ["my-lease"]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] for r in rules)
    assert all(r["resources"] == ["leases"] for r in rules)


def test_the_operators_cluster_role_carries_the_rules_of_its_lease() -> None:
    role = operator_cluster_role(lease="other-id")
    leases = [r for r in role["rules"] if r["resources"] == ["leases"]]
    assert leases == leader_election_rules("other-id")
    assert [r for r in operator_cluster_role()["rules"] if r["resources"] == ["leases"]] == (
        leader_election_rules(OPERATOR_LEASE)
    )


def test_the_namespaced_role_grants_the_lease_in_its_namespace() -> None:
    """Watching one namespace, the operator elects its leader there (lease_namespace)."""
    role, cluster_reads = operator_namespaced_roles("team-a", lease="x")
    assert role["metadata"]["namespace"] == "team-a"
    assert [r for r in role["rules"] if r["resources"] == ["leases"]] == (
        leader_election_rules("x")
    )
    assert not [r for r in cluster_reads["rules"] if r["resources"] == ["leases"]]


def test_specdeploy_operator_rbac_prints_the_role_for_another_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["operator", "rbac", "--leader-election-id", "x-y"]
    args = build_parser(argv).parse_args(argv)
    assert args.handler(args) == 0
    assert "- x-y" in capsys.readouterr().out


# --- the CLI and main -----------------------------------------------------------------


def run_args(*argv: str) -> Any:
    full = ["operator", "run", *argv]
    return build_parser(full).parse_args(full)


def test_leader_election_is_on_by_default_with_the_shared_lease_name() -> None:
    args = run_args()
    assert args.leader_elect is True
    assert args.leader_election_id == cli_operator.DEFAULT_LEASE == OPERATOR_LEASE
    assert args.leader_election_namespace is None
    election = cli_operator._election(args)
    assert election == main.Election(name=OPERATOR_LEASE, timing=Timing())


@pytest.mark.parametrize(
    "argv",
    [["--leader-elect=false"], ["--no-leader-elect"], ["--leader-elect", "off"]],
    ids=["kube-style", "no-flag", "word"],
)
def test_leader_election_can_be_turned_off_for_one_dev_process(argv: list[str]) -> None:
    args = run_args(*argv)
    assert args.leader_elect is False
    assert cli_operator._election(args) is None


def test_a_word_that_is_not_a_boolean_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_args("--leader-elect=maybe")
    assert "'maybe' is not true or false" in capsys.readouterr().err


def test_timings_from_flags_are_checked_before_the_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = run_args("--leader-elect-lease-duration=5", "--leader-elect-renew-deadline=8s")
    with pytest.raises(SystemExit) as stopped:
        cli_operator._election(args)
    assert stopped.value.code == 2
    assert "lease duration (5) must be greater than the renew deadline (8.0)" in (
        capsys.readouterr().err
    )


def fake_client(namespace: str | None = None) -> k8s.Client:
    from kubernetes.client import Configuration

    config = Configuration()
    config.host = "https://127.0.0.1:1"
    return k8s.Client(config, namespace=namespace)


def test_the_namespaced_rbac_command_prints_the_role_for_another_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["operator", "rbac", "--namespace", "team-a", "--leader-election-id", "x-y"]
    args = build_parser(argv).parse_args(argv)
    assert args.handler(args) == 0
    role = next(yaml.safe_load_all(capsys.readouterr().out))
    assert role["kind"] == "Role" and ["x-y"] in [r.get("resourceNames") for r in role["rules"]]


def test_the_elector_uses_its_own_client_short_timeout_and_user_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    client = fake_client("ignored")

    elector = main.elector_for(client, main.Election(name="x"))
    watching_one = main.elector_for(client, main.Election(), ["team-a"])

    assert elector.namespace == "ops" and elector.name == "x"
    assert watching_one.namespace == "team-a"
    assert isinstance(elector.api, k8s.Client) and elector.api is not client
    assert elector.api.user_agent == LEASE_USER_AGENT and client.user_agent == "specdeploy"
    assert elector.api.timeout == 5.0  # half the renew deadline


@pytest.mark.parametrize(
    ("election", "message"),
    [
        (main.Election(namespace="Not_A_Namespace"), "--leader-election-namespace"),
        (main.Election(name="UPPER"), "--leader-election-id"),
    ],
    ids=["namespace", "id"],
)
def test_bad_names_stop_the_start_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch, election: main.Election, message: str
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(SystemExit, match=message):
        main.elector_for(fake_client(), election)


class Started:
    """What ``main.run`` did: whether kopf (``_operate``) ran, and what held then."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.leading_when_started: bool | None = None
        self.gauge_when_started: float | None = None


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch, store: LeaseStore) -> tuple[Started, OperatorMetrics]:
    elector = LeaderElector(store, namespace=NS, identity="me")
    started = Started(elector)
    metrics = OperatorMetrics()
    # run() sets up logging for a process; a test leaves the session's logging as it was.
    monkeypatch.setattr(logging, "basicConfig", lambda **_k: None)
    specdeploy_log = logging.getLogger("specdeploy")
    monkeypatch.setattr(specdeploy_log, "setLevel", lambda _level: None)
    monkeypatch.setattr(k8s, "connect", lambda *_a: fake_client())
    monkeypatch.setattr(main, "serve_metrics", lambda *_a: metrics)
    monkeypatch.setattr(main, "elector_for", lambda *_a: elector)

    def operate(*_a: Any, **_k: Any) -> None:
        started.leading_when_started = elector.is_leader
        started.gauge_when_started = metrics.leader._value.get()

    monkeypatch.setattr(main, "_operate", operate)
    return started, metrics


def test_kopf_starts_only_once_the_lease_is_held_and_the_lease_is_released_after(
    wired: tuple[Started, OperatorMetrics], store: LeaseStore
) -> None:
    started, metrics = wired

    main.run(metrics_port=0)

    assert started.leading_when_started is True and started.gauge_when_started == 1
    assert "holderIdentity" not in store.spec  # released once kopf returned
    assert metrics.leader._value.get() == 0


def test_a_standby_stopped_before_it_leads_never_starts_kopf(
    wired: tuple[Started, OperatorMetrics], monkeypatch: pytest.MonkeyPatch, store: LeaseStore
) -> None:
    started, metrics = wired
    monkeypatch.setattr(leader, "wait_for_leadership", lambda _e: False)

    main.run(metrics_port=0)

    assert started.leading_when_started is None
    assert store.requests == [] and metrics.leader._value.get() == 0


def test_without_leader_election_kopf_starts_at_once(
    wired: tuple[Started, OperatorMetrics], store: LeaseStore
) -> None:
    started, _metrics = wired

    main.run(metrics_port=0, election=None)

    assert started.gauge_when_started == 1
    assert store.requests == []  # no Lease at all
