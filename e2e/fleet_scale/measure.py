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


def requests_by_verb(lines: Iterable[str], user: str, start: float, end: float) -> Counter[str]:
    """Requests of ``user`` completed (a watch: started) in [start, end) unix seconds, by verb."""
    found: Counter[str] = Counter()
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
            found[verb] += 1
    return found


def writes(counts: Counter[str]) -> int:
    return sum(counts[v] for v in WRITES)


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
