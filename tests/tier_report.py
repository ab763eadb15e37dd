"""What one run of a test tier cost: per-test durations, JUnit, minutes per folder, peak memory.

A tier has a time budget (CONTRIBUTING.md), and a budget nobody measures
drifts: the suite grew from 7 to 32 minutes of pytest before anyone timed a
test. So every run that ``make test`` or ``make nightly`` starts (they set
``SPECDEPLOY_TIER``) leaves, under ``$SPECDEPLOY_CACHE/reports/<tier>/<UTC
time>/``, ``durations.json`` (each test's set-up, call and teardown seconds
and outcome) and ``junit.xml``, and ends its terminal output with the
tier's minutes, the minutes per folder, the ten slowest tests and the peak
memory of the memory cgroup the tier runs in (``scripts/memcap``; every
cluster process and vLLM engine the tests start is in it too).

Without ``SPECDEPLOY_TIER`` (a developer's ``pytest path``) nothing is written
and nothing is printed: the plugin only watches tier runs.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from e2e.localcluster.binaries import cache_root

TIER_ENV = "SPECDEPLOY_TIER"
FOLDER_DEPTH = {"e2e/tests": 3, "tests": 2}
"""Path parts that name a test's folder in the per-folder table (e2e/tests/cluster, tests/model)."""


@dataclass
class Cost:
    """One test's seconds by phase, and how it ended."""

    nodeid: str
    setup: float = 0.0
    call: float = 0.0
    teardown: float = 0.0
    outcome: str = "passed"

    @property
    def total(self) -> float:
        return self.setup + self.call + self.teardown


def folder_of(nodeid: str) -> str:
    """The folder a test is counted under: ``e2e/tests/cluster``, ``tests/unit``, ..."""
    parts = nodeid.split("::", 1)[0].split("/")
    for prefix, depth in FOLDER_DEPTH.items():
        if "/".join(parts[: prefix.count("/") + 1]) == prefix:
            return "/".join(parts[:depth])
    return parts[0]


def minutes_by_folder(costs: list[Cost]) -> dict[str, float]:
    """Minutes per folder, the largest first."""
    seconds: dict[str, float] = defaultdict(float)
    for cost in costs:
        seconds[folder_of(cost.nodeid)] += cost.total
    return {f: s / 60 for f, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def slowest(costs: list[Cost], n: int = 10) -> list[Cost]:
    return sorted(costs, key=lambda c: -c.total)[:n]


def cgroup_peak_bytes(proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The peak memory of this process's memory cgroup (v1 or v2), None where unreadable.

    Under ``scripts/memcap`` that cgroup holds the whole tier and nothing else.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        group = path.lstrip("/")
        if "memory" in controllers.split(","):
            candidate = Path("/sys/fs/cgroup/memory") / group / "memory.max_usage_in_bytes"
        elif controllers == "":
            candidate = Path("/sys/fs/cgroup") / group / "memory.peak"
        else:
            continue
        try:
            return int(candidate.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return None


def summary_lines(tier: str, costs: list[Cost], wall_s: float, peak: int | None) -> list[str]:
    """The lines printed at the end of a tier's run."""
    counts: dict[str, int] = defaultdict(int)
    for cost in costs:
        counts[cost.outcome] += 1
    counted = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    peak_text = f"{peak / 2**30:.2f} GiB" if peak is not None else "unknown (no memory cgroup)"
    lines = [
        f"tier {tier}: {wall_s / 60:.1f} min of pytest ({counted}); peak memory {peak_text}",
        "minutes by folder:",
    ]
    lines += [f"  {m:6.1f}  {f}" for f, m in minutes_by_folder(costs).items()]
    lines.append("ten slowest (s):")
    lines += [f"  {c.total:6.1f}  {c.nodeid}" for c in slowest(costs)]
    return lines


class TierReport:
    """The pytest plugin: collects each test's phases, writes and prints at the end."""

    def __init__(self, tier: str, folder: Path) -> None:
        self.tier = tier
        self.folder = folder
        self.costs: dict[str, Cost] = {}
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cost = self.costs.setdefault(report.nodeid, Cost(report.nodeid))
        setattr(cost, report.when, getattr(cost, report.when) + report.duration)
        if report.failed:
            cost.outcome = "error" if report.when != "call" else "failed"
        elif report.skipped and cost.outcome == "passed":
            cost.outcome = "skipped"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        costs = list(self.costs.values())
        wall = time.monotonic() - self.started
        peak = cgroup_peak_bytes()
        record = {
            "tier": self.tier,
            "wall_s": round(wall, 1),
            "peak_bytes": peak,
            "tests": [asdict(c) for c in costs],
        }
        (self.folder / "durations.json").write_text(json.dumps(record, indent=1))
        terminalreporter.section(f"tier report: {self.folder}")
        for line in summary_lines(self.tier, costs, wall, peak):
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)  # before junitxml's, which reads xmlpath
def pytest_configure(config: pytest.Config) -> None:
    # Popped: a pytest that a test starts (the vLLM venv's, tests/model) is not the tier.
    tier = os.environ.pop(TIER_ENV, None)
    if not tier or hasattr(config, "workerinput"):
        return
    folder = cache_root() / "reports" / tier / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder.mkdir(parents=True, exist_ok=True)
    if not config.option.xmlpath:
        config.option.xmlpath = str(folder / "junit.xml")
    config.pluginmanager.register(TierReport(tier, folder), "specdeploy-tier-report")
