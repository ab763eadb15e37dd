"""Leader election over a Lease: of several operator processes, one acts; the others wait.

Why: two operators acting at once (a Deployment scaled to 2, or the surge
pod of a rolling upgrade) double every Event, patch status from two
snapshots, and under version skew each build re-applies its own rendering
of the pod templates, so pods restart over and over (review M1). kopf's
peering freezes every operator when two are found, a collision guard rather
than a hand-over, so this is client-go's contract (``leaderelection``) in a
small loop of our own, over the operator's own client:

* One ``coordination.k8s.io/v1`` Lease names the leader (``holderIdentity``:
  hostname, pid and a random suffix, so a restarted process is a new
  candidate). A candidate takes it by creating it, or by updating it with the
  ``resourceVersion`` it read when its holder is empty or expired: the API
  server's optimistic lock decides a race (409: another candidate won).
* Expiry is judged on this process's own monotonic clock, never by comparing
  the Lease's ``renewTime`` (another host's clock) with ours: a Lease is
  expired when it has not been written (its resourceVersion and spec
  unchanged) for ``leaseDurationSeconds`` since this process saw it change. A
  newly started candidate therefore waits a full lease duration before it
  takes over from a holder that stopped renewing.
* The leader renews every retry period. One that has not renewed within the
  renew deadline (shorter than the lease duration, so it stops before anyone
  else may start) stops acting at once: the process exits with ``EXIT_LOST``,
  so neither kopf nor the telemetry loop writes another request; the pod's
  restart policy brings it back as a candidate. A leader that sees another
  holder in the Lease has lost it already, and exits the same way.
* A leader that stops cleanly (SIGTERM) releases the Lease after kopf has
  stopped: the holder is cleared and the duration set to 1 s, so a waiting
  candidate takes over on its next retry instead of after a lease duration.

The defaults are client-go's (15 s, 10 s, 2 s). Lease requests go through a
client of their own (``lease_client``): a request timeout well inside the
renew deadline, and a user agent of its own (``LEASE_USER_AGENT``) so that an
audit of the operator's writes can leave the renewals (one every retry
period) out. ``Timing`` refuses inconsistent durations, as client-go does.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
import re
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType, TracebackType
from typing import Any

from specdeploy.operator.clients import k8s
from specdeploy.operator.naming import OPERATOR_LEASE
from specdeploy.runtime.kube import paths

__all__ = [
    "DEFAULT_ID",
    "DEFAULT_NAMESPACE",
    "EXIT_LOST",
    "LEASE_USER_AGENT",
    "LeaderElector",
    "Leadership",
    "Timing",
    "acquire",
    "default_identity",
    "exit_lost",
    "lease_client",
    "lease_namespace",
    "wait_for_leadership",
]

log = logging.getLogger("specdeploy.operator.reactor.leader")
Obj = dict[str, Any]

DEFAULT_ID = OPERATOR_LEASE
"""The Lease's name (``--leader-election-id``); the generated ClusterRole names it."""
DEFAULT_NAMESPACE = "default"
"""The last resort for the Lease's namespace (``lease_namespace``): it always exists."""
NAMESPACE_ENV = "POD_NAMESPACE"
"""Set from the downward API (``metadata.namespace``) in the operator's pod."""
EXIT_LOST = 75
"""The exit status of a leader that could not renew (EX_TEMPFAIL: start me again)."""
LEASE_USER_AGENT = "specdeploy/leader-election"
JITTER = 1.2
"""client-go's JitterFactor: a candidate retries after retry_period * (1 + [0, 1.2))."""
FAILURES: tuple[type[Exception], ...] = (k8s.ApiError, *k8s.TRANSPORT_ERRORS)
"""What a Lease request raises when it was refused or got no answer."""
RELEASED_DURATION = 1
"""leaseDurationSeconds of a released Lease: any candidate may take it on sight."""
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


@dataclass(frozen=True)
class Timing:
    """The three durations of the contract, in seconds (client-go's defaults)."""

    lease_duration: int = 15
    """How long a candidate waits, after the Lease last changed, before taking it."""
    renew_deadline: float = 10.0
    """How long a leader may go without renewing before it stops acting."""
    retry_period: float = 2.0
    """How often a leader renews and a candidate tries."""

    def __post_init__(self) -> None:
        problems = timing_problems(self)
        if problems:
            raise ValueError("leader election: " + "; ".join(problems))


def timing_problems(timing: Timing) -> list[str]:
    """What is inconsistent in ``timing`` (client-go refuses the same). Pure."""
    problems = [
        f"{name} must be > 0 (got {value})"
        for name, value in (
            ("lease duration", timing.lease_duration),
            ("renew deadline", timing.renew_deadline),
            ("retry period", timing.retry_period),
        )
        if value <= 0
    ]
    if timing.lease_duration <= timing.renew_deadline:
        # A leader must stop before another candidate may start.
        problems.append(
            f"lease duration ({timing.lease_duration}) must be greater than "
            f"the renew deadline ({timing.renew_deadline})"
        )
    if timing.renew_deadline <= JITTER * timing.retry_period:
        problems.append(
            f"renew deadline ({timing.renew_deadline}) must be greater than "
            f"{JITTER} x the retry period ({timing.retry_period})"
        )
    return problems


def default_identity() -> str:
    """hostname_pid_suffix: the pod's name in a pod, and unique across restarts."""
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(4)}"


def valid_lease_name(name: str) -> bool:
    """A Lease's name is a DNS subdomain."""
    return bool(_DNS_SUBDOMAIN.match(name))


def valid_namespace(name: str) -> bool:
    """A namespace's name is a DNS label."""
    return bool(_DNS_LABEL.match(name))


def lease_namespace(
    flag: str | None,
    *,
    watched: Sequence[str] = (),
    env: Mapping[str, str],
    client_namespace: str | None,
) -> str:
    """Where the Lease lives: the flag; else the one watched namespace; else the
    operator's own namespace; else ``default``.

    Watching one namespace is the namespaced mode, whose generated Role grants
    the Lease in that namespace and nowhere else. Otherwise the own namespace
    is, in a pod, ``$POD_NAMESPACE`` (the downward API) or the
    ServiceAccount's (the client read it from the token mount); out of a
    cluster, the kubeconfig context's, as kubectl would use. Every replica
    of one installation resolves the same one; two installations with
    different namespaces (or ids) elect separately.
    """
    single = watched[0] if len(watched) == 1 else None
    for candidate in (flag, single, env.get(NAMESPACE_ENV), client_namespace):
        if candidate and candidate.strip():
            return candidate.strip()
    return DEFAULT_NAMESPACE


def lease_client(client: k8s.Client, *, timeout: float) -> k8s.Client:
    """The same server and identity, with a request timeout of its own and its own user agent.

    A renewal that hangs for the client's usual 30 s would outlive the renew
    deadline; the deadline watch stops the process anyway, and the short
    timeout lets the next retry happen in time.
    """
    lease = k8s.Client(
        copy.deepcopy(client.configuration), namespace=client.namespace, timeout=timeout
    )
    lease.user_agent = LEASE_USER_AGENT
    return lease


def micro_time(at: datetime) -> str:
    """A ``MicroTime`` as the API server writes it: RFC 3339, microseconds, UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _holder(lease: Mapping[str, Any] | None) -> str:
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


class LeaderElector:
    """One candidate's view of the Lease, and the one step that acquires or renews it.

    One thread steps it (``acquire``, then ``Leadership``'s renewer) and the
    deadline watch only reads; ``release`` may come from another thread, so a
    step and a release never overlap (a renewal answered after the release
    would take the Lease back).
    ``monotonic`` judges expiry and deadlines; ``now`` stamps the Lease's
    times (for people and tools reading it, never compared across hosts).
    """

    def __init__(
        self,
        api: k8s.Api,
        *,
        namespace: str,
        name: str = DEFAULT_ID,
        identity: str | None = None,
        timing: Timing | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.timing = timing or Timing()
        self._monotonic = monotonic
        self._now = now
        self._lease: Obj | None = None
        """The Lease as last read or written."""
        self._observed: Obj | None = None
        """The Lease's resourceVersion and spec as last seen."""
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        """When the last write that made or kept us leader was sent; None: not leader."""
        self.lost_to: str | None = None
        """Another holder this process saw while it led: leadership is gone."""
        self._last_problem = ""
        self._lock = threading.Lock()
        self._closed = False

    @property
    def path(self) -> str:
        return paths.path("Lease", self.namespace, self.name)

    @property
    def is_leader(self) -> bool:
        return self._renewed_at is not None

    @property
    def holder(self) -> str:
        """The holder in the Lease as last seen ("" when free or never read)."""
        return _holder(self._lease)

    def renew_overdue(self) -> bool:
        """A leader that has gone longer than the renew deadline without renewing."""
        renewed = self._renewed_at
        return renewed is not None and self._monotonic() - renewed > self.timing.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this process leads afterwards. Never raises for the API.

        A leader first updates the Lease it last wrote (one request); on a
        conflict, or as a candidate, it reads the Lease and decides again.
        """
        with self._lock:
            return not self._closed and self._step(self._monotonic())

    def _step(self, started: float) -> bool:
        renewing = self.is_leader and self._lease is not None
        if renewing and self._write("PUT", self.path, self._claimed(self._lease or {}), started):
            return True
        current, found = self._read()
        if not found:
            return False
        if current is None:
            return self._write("POST", paths.path("Lease", self.namespace), self._fresh(), started)
        self._observe(current)
        holder = _holder(current)
        if holder and holder != self.identity:
            if self.is_leader:
                # Another candidate judged our lease expired and took it: we lead no more.
                self.lost_to = holder
                self._renewed_at = None
                return False
            if not self._expired():
                return False
        return self._write("PUT", self.path, self._claimed(current), started)

    def release(self) -> bool:
        """Clear the holder of a Lease we hold, so a candidate takes over at once.

        Waits for a step in flight; no step acquires or renews afterwards.
        """
        with self._lock:
            self._closed = True
            return self._release()

    def _release(self) -> bool:
        if not self.is_leader or self._lease is None:
            return False
        body = copy.deepcopy(self._lease)
        spec = body.setdefault("spec", {})
        stamp = micro_time(self._now())
        spec.pop("holderIdentity", None)
        spec.update(leaseDurationSeconds=RELEASED_DURATION, acquireTime=stamp, renewTime=stamp)
        self._renewed_at = None
        try:
            self._lease = self.api.request("PUT", self.path, body=body)
        except FAILURES as err:
            log.warning("leader election: could not release %s: %s", self._where(), err)
            return False
        log.info("leader election: released %s", self._where())
        return True

    # --- the Lease's content -----------------------------------------------

    def _fresh(self) -> Obj:
        stamp = micro_time(self._now())
        return {
            "apiVersion": paths.kind_of("Lease").api_version,
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "specdeploy"},
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.timing.lease_duration,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }

    def _claimed(self, lease: Mapping[str, Any]) -> Obj:
        """``lease`` held by us from now (its resourceVersion kept: the optimistic lock)."""
        body = copy.deepcopy(dict(lease))
        spec = body.setdefault("spec", {})
        stamp = micro_time(self._now())
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.timing.lease_duration,
            renewTime=stamp,
        )
        return body

    # --- observing ---------------------------------------------------------

    def _observe(self, lease: Mapping[str, Any]) -> None:
        """Remember when the Lease was last written (its resourceVersion moved), on our clock.

        The resourceVersion rather than renewTime alone: a renewal is a write
        whatever the writer's wall clock says.
        """
        self._lease = dict(lease)
        seen = {
            "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion"),
            **(lease.get("spec") or {}),
        }
        if seen != self._observed:
            self._observed = seen
            self._observed_at = self._monotonic()

    def _expired(self) -> bool:
        spec = self._observed or {}
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
        return self._monotonic() >= self._observed_at + duration

    # --- requests ----------------------------------------------------------

    def _read(self) -> tuple[Obj | None, bool]:
        """(the Lease or None when absent, whether the read got an answer)."""
        try:
            return self.api.request("GET", self.path), True
        except k8s.ApiError as err:
            if err.status == 404:
                return None, True
            self._problem(err)
        except k8s.TRANSPORT_ERRORS as err:
            self._problem(err)
        return None, False

    def _write(self, method: str, path: str, body: Obj, started: float) -> bool:
        try:
            written = self.api.request(method, path, body=body)
        except k8s.ApiError as err:
            if err.status != 409:  # a 409 is a lost race (or a stale view), not trouble
                self._problem(err)
            return False
        except k8s.TRANSPORT_ERRORS as err:
            self._problem(err)
            return False
        if not self.is_leader:
            log.info("leader election: %s acquired %s", self.identity, self._where())
        self._observe(written)
        self._renewed_at = started
        self._last_problem = ""
        return True

    def _where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def _problem(self, err: Exception) -> None:
        """Log a failed request once per distinct problem (it repeats every retry period)."""
        text = str(err)
        if isinstance(err, k8s.ApiError) and err.status == 403:
            text += " (the operator's ClusterRole grants leases get/create/update; "
            text += "`specdeploy operator rbac` prints it)"
        elif isinstance(err, k8s.ApiError) and err.status == 404:
            text += f" (does namespace {self.namespace} exist? --leader-election-namespace)"
        level = logging.DEBUG if text == self._last_problem else logging.WARNING
        self._last_problem = text
        log.log(level, "leader election: %s: %s", self._where(), text)


# --- the loops ---------------------------------------------------------------------


def jittered(period: float, fraction: float) -> float:
    """client-go's wait.Jitter: ``period`` stretched by up to JITTER, ``fraction`` in [0, 1)."""
    return period * (1.0 + JITTER * fraction)


def acquire(
    elector: LeaderElector,
    *,
    stopped: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
    fraction: Callable[[], float] = random.random,
) -> bool:
    """Try every (jittered) retry period until this process leads (True) or ``stopped()``."""
    while not stopped():
        if elector.try_acquire_or_renew():
            return True
        deadline = jittered(elector.timing.retry_period, fraction())
        # Short naps, so a stop request is seen within a fraction of a second.
        waited = 0.0
        while waited < deadline and not stopped():
            nap = min(0.2, deadline - waited)
            sleep(nap)
            waited += nap
    return False


def wait_for_leadership(elector: LeaderElector) -> bool:
    """``acquire`` until SIGTERM or SIGINT (False: stopped as a standby, holding nothing).

    Only the main thread may install signal handlers; kopf installs its own
    once it runs, and ours are restored before it does.
    """
    stop = [False]

    def stopping(signum: int, _frame: FrameType | None) -> None:
        log.info("leader election: signal %d while standing by; stopping", signum)
        stop[0] = True

    previous = {sig: signal.signal(sig, stopping) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        log.info(
            "leader election: %s standing by for Lease %s/%s",
            elector.identity,
            elector.namespace,
            elector.name,
        )
        return acquire(elector, stopped=lambda: stop[0])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_lost(reason: str) -> None:
    """Stop acting at once: log, flush, and end the process without running any cleanup.

    ``sys.exit`` from a thread ends only that thread, and a graceful kopf stop
    could still send writes; ``os._exit`` sends none.
    """
    log.critical("leader election: %s; exiting with status %d", reason, EXIT_LOST)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # flushing is best effort on the way out
            handler.flush()
    os._exit(EXIT_LOST)


class Leadership:
    """While this process leads: a renewer and a deadline watch, two daemon threads.

    The renewer renews every retry period. The watch checks the deadline
    several times a second on its own thread, so a renewal stuck in a
    request cannot keep a leader acting past its deadline. ``on_lost`` is
    called once, from either thread (default: ``exit_lost``).
    """

    def __init__(
        self,
        elector: LeaderElector,
        *,
        on_lost: Callable[[str], None] = exit_lost,
        watch_period: float = 0.25,
    ) -> None:
        self.elector = elector
        self._on_lost = on_lost
        self._watch_period = watch_period
        self._stop = threading.Event()
        self._lost = threading.Lock()
        self._threads = [
            threading.Thread(target=self._renew, name="lease-renewer", daemon=True),
            threading.Thread(target=self._watch, name="lease-deadline", daemon=True),
        ]

    def __enter__(self) -> Leadership:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop renewing (the caller then releases, or lets the Lease expire)."""
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=self.elector.timing.retry_period + 1.0)

    def step(self) -> str | None:
        """One renewal; the reason leadership is lost, or None. (The renewer's body.)"""
        elector = self.elector
        if elector.try_acquire_or_renew():
            return None
        if elector.lost_to is not None:
            return f"Lease {elector.namespace}/{elector.name} is now held by {elector.lost_to}"
        if elector.renew_overdue():
            return self._overdue()
        return None

    def _overdue(self) -> str:
        deadline = self.elector.timing.renew_deadline
        return f"could not renew the Lease within the renew deadline ({deadline:g} s)"

    def _renew(self) -> None:
        while not self._stop.wait(self.elector.timing.retry_period):
            reason = self._guarded_step()
            if reason is not None:
                self._lose(reason)
                return

    def _guarded_step(self) -> str | None:
        try:
            return self.step()
        except Exception as err:  # a bug must not leave a leader acting unrenewed
            log.exception("leader election: renewal raised")
            return f"renewal raised {type(err).__name__}: {err}"

    def _watch(self) -> None:
        while not self._stop.wait(self._watch_period):
            if self.elector.renew_overdue():
                self._lose(self._overdue())
                return

    def _lose(self, reason: str) -> None:
        if self._stop.is_set() or not self._lost.acquire(blocking=False):
            return
        self._on_lost(reason)
