"""One reconcile of one SpeculativeDeployment: gather, decide, plan, send.

The only sequence that mixes I/O and decisions, kept to a few lines so the
shape is obvious: read the world (``k8s.gather``), decide purely
(``decide.decide``), turn the decision into requests purely
(``plan.plan``), send them (``k8s.send``). The clock is injected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

from specdeploy.operator.builders.common import Parent
from specdeploy.operator.clients import k8s
from specdeploy.operator.clients.watch_cache import WatchCache
from specdeploy.operator.config import DEFAULT_CONFIG, Clock, Config, utc_now
from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import event_write, plan_children, status_write
from specdeploy.operator.decision.status import APPLIED, EventSpec, with_refusals
from specdeploy.operator.manifests import ref_of
from specdeploy.operator.pool.autoscale import ScaleState
from specdeploy.operator.pool.context import Memory
from specdeploy.operator.telemetry.window import TelemetryReport
from specdeploy.runtime.kube.requests import Request

ScaleMemory = MutableMapping[tuple[str, str], Mapping[str, ScaleState]]
"""The autoscaler's state by (namespace, name), then by pool (GPU type)."""
log = logging.getLogger("specdeploy.operator")


@dataclass(frozen=True)
class Result:
    """What one reconcile did: the requests it sent (none when nothing changed)."""

    requests: tuple[Request, ...]
    phase: str | None
    status_version: str | None = None
    """The deployment's resourceVersion after this reconcile's status write (None: none
    written): a cached view that has reached it holds that write."""


def reconcile_once(
    api: k8s.Api,
    namespace: str,
    name: str,
    *,
    config: Config = DEFAULT_CONFIG,
    clock: Clock = utc_now,
    telemetry: TelemetryReport | None = None,
    scale: ScaleMemory | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    cache: WatchCache | None = None,
    cached_body: bool = False,
) -> Result:
    """One reconcile; ``telemetry``: the telemetry loop's interval for it, when it just ran.

    ``scale``: the autoscaler's state per deployment, kept by the caller between
    reconciles (in memory, as the HPA controller keeps its recommendations);
    updated once the children were sent. ``cache``: the watches' view ``gather`` reads;
    ``cached_body``: the deployment's own body from it too (``k8s.gather``).
    """
    body, observed = k8s.gather(api, namespace, name, cache=cache, cached_body=cached_body)
    key = (namespace, name)
    remembered = {} if scale is None else scale.get(key, {})
    memory = Memory(telemetry=telemetry, scale=remembered, monotonic=monotonic())
    if body is None or body["metadata"].get("deletionTimestamp"):
        if scale is not None:
            scale.pop(key, None)
        return Result((), None)  # garbage collection removes the children
    now = clock()
    decision = decide(body, observed, now=now, config=config, memory=memory)
    unseen = [
        ref_of(m) for m in (*decision.owned, *decision.shared) if observed.child(*ref_of(m)) is None
    ]
    foreign = k8s.unlisted(api, namespace, unseen) if unseen else {}
    if foreign:  # names taken by objects not labelled ours: decide again seeing them
        merged = {
            k: {**observed.children.get(k, {}), **foreign.get(k, {})}
            for k in {*observed.children, *foreign}
        }
        observed = replace(observed, children=merged)
        decision = decide(body, observed, now=now, config=config, memory=memory)
    children = plan_children(body, decision, observed)
    for req in children:
        log.info("%s/%s: %s", namespace, name, req.what)
    refused = k8s.send_each(api, children)
    if cache is not None:
        refused_ids = {id(r) for r, _ in refused}
        for req in children:
            if id(req) not in refused_ids:
                cache.wrote(req.path)
    if scale is not None and not refused:
        scale[key] = decision.scale
    status, events = decision.status, list(decision.events)
    if refused:
        # Every other write went; the status says which were refused and why (review H4).
        generation = int(body["metadata"].get("generation") or 1)
        status = with_refusals(status, [(r.what, e.message) for r, e in refused], now, generation)
        events.append(EventSpec("Warning", "ChildRefused", status_message(status)))
    status_writes = status_write(body, status)
    rest = [
        *status_writes,
        *(event_write(Parent.of(body), e, now=now) for e in events),
    ]
    for req in rest:
        log.info("%s/%s: %s", namespace, name, req.what)
    answers: list[dict[str, Any]] = []
    k8s.send(api, rest, answers)
    version = None  # the status write goes first: its answer is the first
    if status_writes and answers:
        version = (answers[0].get("metadata") or {}).get("resourceVersion")
    requests = (*children, *rest)
    log.debug(
        "%s/%s: reconciled, %d request(s), phase %s",
        namespace,
        name,
        len(requests),
        status.get("phase"),
    )
    if refused:
        raise k8s.ChildrenRefused(refused)
    return Result(tuple(requests), status.get("phase"), version)


def status_message(status: Mapping[str, Any]) -> str:
    """The refusal condition's message, for the Warning event."""
    found = [c for c in status.get("conditions") or [] if c.get("type") == APPLIED]
    return str(found[0].get("message", "")) if found else "a child write was refused"
