"""Send fuzzed specs to a real API server in batches and judge each (``oracle.py``).

A batch is one namespace: its specs are POSTed, the runner waits until the
operator has observed every accepted one, writes the profiles the Jobs ask
for (``landing.py``), waits until the operator is quiet, checks every spec,
reconciles a canary (the operator is alive and not stalled), scans the
operator's log, and deletes the namespace. Waits are bounded; a spec not
observed in time is a violation, not a hang.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.fuzz import landing, oracle
from e2e.fuzz.strategies import GPU_TYPES, HOLD
from e2e.localcluster import audit
from e2e.localcluster.kubeapi import ApiError, KubeApi
from specdeploy.operator.builders.common import POOL_LABEL
from specdeploy.operator.naming import label_value
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
MANAGED = "app.kubernetes.io/managed-by=specdeploy"
OBSERVE_SECONDS = 120.0
QUIET_SECONDS = 4.0
SETTLE_SECONDS = 60.0
CANARY_SECONDS = 60.0
MISMATCH_EVERY = 5
"""Every 5th profiling Job gets a profile with another fingerprint under its name (F3)."""
_FIELD = re.compile(r"(spec(?:\.[A-Za-z0-9_]+|\[\d+\])+)")


@dataclass
class Target:
    """The cluster under test, as the runner needs it."""

    api: KubeApi
    operator_log: Path
    audit_log: Path
    operator_alive: Callable[[], bool]


@dataclass
class Outcome:
    """What became of one spec."""

    index: int
    name: str
    kind: str  # rejected | invalid | valid | error
    reason: str = ""
    path: str = ""
    message: str = ""
    violations: list[str] = field(default_factory=list)


@dataclass
class Report:
    seed: int
    batch_size: int
    prefix: str = "fuzz"
    """Namespaces are ``<prefix>-<seed>-<batch>``."""
    outcomes: list[Outcome] = field(default_factory=list)
    batch_violations: list[str] = field(default_factory=list)
    profiles_landed: int = 0
    profiles_mismatched: int = 0
    deployments_served: int = 0
    canaries: int = 0
    wall_seconds: float = 0.0

    def namespace(self, batch: int) -> str:
        return f"{self.prefix}-{self.seed}-{batch}"

    @property
    def violations(self) -> list[str]:
        found = [
            f"spec {o.index} ({o.name[:60]}): {v}" for o in self.outcomes for v in o.violations
        ]
        return found + self.batch_violations


def generic_field(path: str) -> str:
    """``spec.pools[3].gpuType`` -> ``spec.pools[].gpuType``: counts group by field."""
    return re.sub(r"\[\d+\]", "[]", path)


def canary(name: str) -> Obj:
    """A spec that is valid under any code: it must reach Valid=True after every batch."""
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {"method": "ngram", "maxK": 3},
            "pools": [{"gpuType": GPU_TYPES[2]}],
            "nodeSelector": {HOLD[0]: HOLD[1]},
        },
    }


def run(
    target: Target,
    bodies: list[Obj],
    *,
    seed: int,
    batch_size: int = 50,
    prefix: str = "fuzz",
    log: Callable[[str], None] = print,
) -> Report:
    """Every body through the API server and the operator, ``batch_size`` at a time."""
    report = Report(seed=seed, batch_size=batch_size, prefix=prefix)
    started = time.monotonic()
    for number, first in enumerate(range(0, len(bodies), batch_size)):
        batch = list(enumerate(bodies[first : first + batch_size], start=first))
        _run_batch(target, batch, report.namespace(number), report)
        done = first + len(batch)
        log(
            f"fuzz: {done}/{len(bodies)} specs, {len(report.violations)} violation(s), "
            f"{time.monotonic() - started:.0f}s"
        )
    report.wall_seconds = round(time.monotonic() - started, 1)
    return report


def _run_batch(
    target: Target, batch: list[tuple[int, Obj]], namespace: str, report: Report
) -> None:
    api = target.api
    log_offset = target.operator_log.stat().st_size if target.operator_log.exists() else 0
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        accepted = _post_all(api, namespace, batch, report)
        _wait(lambda: _unobserved(api, namespace, accepted) == [], OBSERVE_SECONDS)
        report.profiles_landed, report.profiles_mismatched = (
            a + b
            for a, b in zip(
                (report.profiles_landed, report.profiles_mismatched),
                _land_profiles(api, namespace),
                strict=True,
            )
        )
        _wait_quiet(target, namespace)
        _judge(target, namespace, accepted, report)
        _check_canary(api, namespace, report)
        report.canaries += 1
    finally:
        _check_operator(target, log_offset, namespace, report)
        try:
            api.delete(paths.path("Namespace", name=namespace))
        except ApiError as err:
            report.batch_violations.append(f"{namespace}: delete answered {err.status}")


def _post_all(
    api: KubeApi, namespace: str, batch: list[tuple[int, Obj]], report: Report
) -> dict[str, tuple[Outcome, Obj]]:
    accepted: dict[str, tuple[Outcome, Obj]] = {}
    for index, body in batch:
        name = str(body["metadata"]["name"])
        outcome = Outcome(index=index, name=name, kind="error")
        report.outcomes.append(outcome)
        try:
            api.post(paths.path("SpeculativeDeployment", namespace), body)
        except ApiError as err:
            outcome.message = str(err)[:400]
            if err.status == 422:
                outcome.kind = "rejected"
                found = _FIELD.search(str(err))
                outcome.path = generic_field(found.group(1)) if found else "metadata/other"
            else:
                outcome.violations.append(
                    f"POST answered {err.status}, not 201 or 422: {err}"[:400]
                )
            continue
        accepted[name] = (outcome, body)
    return accepted


def _items(api: KubeApi, kind: str, namespace: str, **query: str) -> list[Obj]:
    found = api.items(paths.path(kind, namespace), **query)
    for item in found:
        item.setdefault("kind", kind)
    return found


def _unobserved(api: KubeApi, namespace: str, accepted: dict[str, Any]) -> list[str]:
    stored = {o["metadata"]["name"]: o for o in _items(api, "SpeculativeDeployment", namespace)}
    return [n for n in accepted if n not in stored or not oracle.observed(stored[n])]


def _wait(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(1.0)
    return done()


def _land_profiles(api: KubeApi, namespace: str) -> tuple[int, int]:
    landed = mismatched = 0
    for job in _items(api, "Job", namespace, labelSelector=MANAGED):
        fingerprint = landing.fingerprint_of(job)
        if fingerprint is None:
            continue
        name = fingerprint.profile_name()
        wrong = int(name[2:10], 16) % MISMATCH_EVERY == 0
        stored = landing.mismatched(fingerprint, landed) if wrong else fingerprint
        doc = landing.profile_document(name, namespace, stored)
        try:
            api.post(paths.path("SpeculationProfile", namespace), doc)
        except ApiError as err:
            if err.status != 409:  # another Job of the batch named the same profile
                raise
            continue
        landed += 1
        mismatched += wrong
    return landed, mismatched


def _operator_writes(target: Target, namespace: str) -> list[audit.Write]:
    return [
        w
        for w in audit.read_writes(target.audit_log)
        if w.namespace == namespace and w.user_agent == audit.OPERATOR_USER_AGENT
    ]


def _wait_quiet(target: Target, namespace: str) -> None:
    """Until the operator wrote nothing in the namespace for QUIET_SECONDS (bounded)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(_operator_writes(target, namespace))
        if count != seen:
            seen, since = count, time.monotonic()
        elif time.monotonic() - since >= QUIET_SECONDS:
            return
        time.sleep(1.0)


def _judge(
    target: Target, namespace: str, accepted: dict[str, tuple[Outcome, Obj]], report: Report
) -> None:
    api = target.api
    stored = {o["metadata"]["name"]: o for o in _items(api, "SpeculativeDeployment", namespace)}
    children = [c for kind in oracle.LISTED_KINDS for c in _items(api, kind, namespace)]
    mismatched = {
        p["metadata"]["name"]
        for p in _items(api, "SpeculationProfile", namespace)
        if landing.fingerprint_of_profile(p) != p["metadata"]["name"]
    }
    report.deployments_served += sum(1 for c in children if c["kind"] == "Deployment")
    for name, (outcome, sent) in accepted.items():
        body = stored.get(name)
        if body is None:
            outcome.violations.append("accepted, then gone")
            continue
        _judge_one(outcome, body, sent, children, mismatched)
    report.batch_violations += [f"{namespace}: {v}" for v in oracle.long_names(children)]
    writes = [(w.what, w.name, w.code) for w in _operator_writes(target, namespace)]
    report.batch_violations += [f"{namespace}: refused {v}" for v in oracle.refused_writes(writes)]


def _judge_one(
    outcome: Outcome, body: Obj, sent: Obj, children: Iterable[Obj], mismatched: set[str]
) -> None:
    if not oracle.observed(body):
        outcome.violations.append(f"generation {body['metadata'].get('generation')} not observed")
        return
    valid = oracle.condition(body, "Valid") or {}
    owned = oracle.owned_by(body["metadata"]["uid"], children)
    if valid.get("status") == "False":
        outcome.kind = "invalid"
        outcome.reason = str(valid.get("reason", ""))
        outcome.message = str(valid.get("message", ""))[:400]
        path = oracle.named_field(outcome.message)
        outcome.path = generic_field(path) if path else ""
        outcome.violations += oracle.check_valid_false(body, sent)
        if owned:
            outcome.violations.append(f"Valid=False yet owns {', '.join(owned[:5])}")
        return
    outcome.kind = "valid"
    applied = oracle.condition(body, "Applied")
    if applied is not None and applied.get("status") == "False":
        outcome.violations.append(f"valid, yet a child was refused: {applied.get('message')}"[:400])
    for pool in (body.get("status") or {}).get("pools") or ():
        if pool.get("profile") in mismatched:
            pool_label = label_value(str(pool.get("gpuType")))
            served = [
                c["metadata"]["name"]
                for c in children
                if c["kind"] == "Deployment"
                and c["metadata"].get("labels", {}).get(POOL_LABEL) == pool_label
                and oracle.owned_by(body["metadata"]["uid"], [c])
            ]
            if served:
                outcome.violations.append(
                    f"pool {pool.get('gpuType')} served profile {pool['profile']}, whose "
                    f"fingerprint names another profile (Deployment {served[0]})"
                )


def _check_canary(api: KubeApi, namespace: str, report: Report) -> None:
    name = "canary"
    api.post(paths.path("SpeculativeDeployment", namespace), canary(name))
    path = paths.path("SpeculativeDeployment", namespace, name)

    def reconciled() -> bool:
        body = api.get(path)
        valid = oracle.condition(body, "Valid") or {}
        return oracle.observed(body) and valid.get("status") == "True"

    if not _wait(reconciled, CANARY_SECONDS):
        report.batch_violations.append(
            f"{namespace}: the canary was not reconciled in {CANARY_SECONDS:.0f}s"
        )


def _check_operator(target: Target, offset: int, namespace: str, report: Report) -> None:
    if not target.operator_alive():
        report.batch_violations.append(f"{namespace}: the operator process is gone")
    if target.operator_log.exists():
        with target.operator_log.open("rb") as lines:
            lines.seek(offset)
            text = lines.read().decode(errors="replace")
        report.batch_violations += [
            f"{namespace}: operator log: {a}" for a in oracle.log_alarms(text)
        ]
