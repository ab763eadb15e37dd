"""One reconcile of one SpeculativeDeployment: gather, decide, plan, send.

The only sequence that mixes I/O and decisions, kept to a few lines so the
shape is obvious: read the world (``k8s.gather``), decide purely
(``decide.decide``), turn the decision into requests purely
(``plan.plan``), send them (``k8s.send``). The clock is injected.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from specdeploy.operator import k8s
from specdeploy.operator.decide import DEFAULT_CONFIG, Config, decide
from specdeploy.operator.plan import plan
from specdeploy.operator.telemetry.window import TelemetryReport
from specdeploy.runtime.kube.requests import Request

Clock = Callable[[], str]
log = logging.getLogger("specdeploy.operator")


def utc_now() -> str:
    """RFC 3339 at second precision, as Kubernetes writes times."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Result:
    """What one reconcile did: the requests it sent (none when nothing changed)."""

    requests: tuple[Request, ...]
    phase: str | None


def reconcile_once(
    api: k8s.Api,
    namespace: str,
    name: str,
    *,
    config: Config = DEFAULT_CONFIG,
    clock: Clock = utc_now,
    telemetry: TelemetryReport | None = None,
) -> Result:
    """One reconcile; ``telemetry``: the telemetry loop's interval for it, when it just ran."""
    body, observed = k8s.gather(api, namespace, name)
    observed = replace(observed, telemetry=telemetry)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return Result((), None)  # garbage collection removes the children
    now = clock()
    decision = decide(body, observed, now=now, config=config)
    requests = plan(body, decision, observed, now=now)
    for req in requests:
        log.info("%s/%s: %s", namespace, name, req.what)
    k8s.send(api, requests)
    log.debug(
        "%s/%s: reconciled, %d request(s), phase %s",
        namespace,
        name,
        len(requests),
        decision.status.get("phase"),
    )
    return Result(tuple(requests), decision.status.get("phase"))
