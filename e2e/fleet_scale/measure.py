"""Reading the figures: audit-log requests in a time window, /proc stats, operator metrics.

Pure parsers over text the bench reads (the API server's audit log lines,
``/proc/<pid>/stat`` and ``status``, Prometheus' text format), so they are
unit-tested without a cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import datetime

WRITES = ("create", "update", "patch", "delete", "deletecollection")


Request = tuple[str, str]
"""(verb, resource) of one audited request; the resource with its subresource after a slash."""

HOUSEKEEPING = frozenset({"leases", "events"})
"""Resources an idle operator writes without reconciling anything: its leader election's
Lease renewals (a constant rate, whatever the fleet's size) and Events."""


def requests_in_window(
    lines: Iterable[str], user: str, start: float, end: float
) -> Counter[Request]:
    """Requests of ``user`` completed (a watch: started) in [start, end) unix seconds."""
    found: Counter[Request] = Counter()
    seen: set[str] = set()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (event.get("user") or {}).get("username") != user:
            continue
        verb = event.get("verb", "")
        if verb == "watch":
            if event.get("auditID") in seen:
                continue
            seen.add(event.get("auditID", ""))
        elif event.get("stage") != "ResponseComplete":
            continue
        at = datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        if start <= at < end:
            ref = event.get("objectRef") or {}
            sub = ref.get("subresource", "")
            found[(verb, ref.get("resource", "") + (f"/{sub}" if sub else ""))] += 1
    return found


def by_verb(requests: Counter[Request]) -> Counter[str]:
    verbs: Counter[str] = Counter()
    for (verb, _), n in requests.items():
        verbs[verb] += n
    return verbs


def writes(requests: Counter[Request], *, housekeeping: bool = True) -> int:
    """Write requests; ``housekeeping=False`` leaves out Lease renewals and Events."""
    return sum(
        n
        for (verb, resource), n in requests.items()
        if verb in WRITES and (housekeeping or resource.split("/", 1)[0] not in HOUSEKEEPING)
    )


def cpu_seconds(stat: str, ticks: int) -> float:
    """utime + stime from ``/proc/<pid>/stat`` (fields after the command's parenthesis)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_mib(status: str, field: str = "VmRSS") -> float:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in MiB."""
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def metric_sum(text: str, name: str) -> float:
    """The sum of every sample of ``name`` (any labels) in Prometheus' text format."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total
