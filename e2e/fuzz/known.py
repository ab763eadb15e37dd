"""Violations of a known defect whose fix lies outside this package's remit.

Each entry: a substring of a spec's violation, and the regression fixtures that
replay it (strict xfail there, so this entry goes when the defect is fixed).
The run reports these apart from the rest; the per-PR test fails on any other.
"""

from __future__ import annotations

import re

from e2e.fuzz.runner import Report

KNOWN_DEFECTS: dict[str, str] = {}
"""None open: the one the fuzzer found (characters beyond U+FFFF in an apply body) is
fixed in the client's encoding (``requests.yaml_safe_json``)."""
_REFUSED = re.compile(r"^(\S+): refused patch deployments (\S+) -> 400 ")


def split(report: Report) -> tuple[list[str], list[str]]:
    """(unknown, known) violations; a refused Deployment apply of a spec with a known
    defect is that defect's too."""
    known: list[str] = []
    unknown: list[str] = []
    tainted: set[tuple[str, str]] = set()
    for o in report.outcomes:
        namespace = report.namespace(o.index // report.batch_size)
        for v in o.violations:
            line = f"spec {o.index} ({o.name[:60]}): {v}"
            if any(pattern in v for pattern in KNOWN_DEFECTS):
                known.append(line)
                tainted.add((namespace, o.name))
            else:
                unknown.append(line)
    for v in report.batch_violations:
        found = _REFUSED.match(v)
        if found and any(
            ns == found.group(1) and found.group(2).startswith(name + "-") for ns, name in tainted
        ):
            known.append(v)
        else:
            unknown.append(v)
    return unknown, known
