"""helm-unittest's suites (``charts/specdeploy/tests``), run and judged from pytest.

helm-unittest's summary line is not a format CI reads, so each run writes JUnit XML and
the test fails on any failed or errored case, or when fewer cases ran than the suites
declare. Suites under ``tests/`` run on the chart as it is; ``tests/with-files`` on a copy
whose ``dashboards/`` and ``rules/`` hold this folder's fixtures, ``tests/without-files`` on
a copy with neither (the templates' logic for present and absent files, whatever the
other generators have committed).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.localcluster.binaries import Binaries
from e2e.tests.chart.chart_render import CHART, FIXTURES, RULES

SUITES = CHART / "tests"


@dataclass(frozen=True)
class Result:
    tests: int
    failures: int
    errors: int
    output: str


def helm_unittest() -> Path:
    return Binaries.for_checkout().path("helm-unittest")


def run_suites(chart: Path, pattern: str, tmp: Path) -> Result:
    report = tmp / "junit.xml"
    done = subprocess.run(
        [str(helm_unittest()), "--strict", "--file", pattern, "--output-type", "JUnit",
         "--output-file", str(report), str(chart)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert report.is_file(), f"helm-unittest wrote no report (exit {done.returncode}):\n{output}"
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    result = Result(total["tests"], total["failures"], total["errors"], output)
    # A non-zero exit with no failure recorded would be a crash the report hides.
    assert (done.returncode != 0) == bool(result.failures or result.errors), output
    return result


def declared(pattern: str, chart: Path) -> int:
    """How many cases the suites matching ``pattern`` declare (``- it:`` entries)."""
    return sum(
        len(re.findall(r"^  - it: ", path.read_text(), re.MULTILINE))
        for path in chart.glob(pattern)
    )


def chart_with_fixture_files(tmp: Path) -> Path:
    copy = chart_without_files(tmp)
    (copy / "rules").mkdir()
    shutil.copy(FIXTURES / RULES, copy / RULES)
    for board in (FIXTURES / "dashboards").glob("*.json"):
        shutil.copy(board, copy / "dashboards")
    return copy


def chart_without_files(tmp: Path) -> Path:
    copy = tmp / "specdeploy"
    shutil.copytree(CHART, copy)
    shutil.rmtree(copy / "rules", ignore_errors=True)
    shutil.rmtree(copy / "dashboards", ignore_errors=True)
    (copy / "dashboards").mkdir()
    return copy


@pytest.mark.parametrize(
    ("pattern", "make_chart"),
    [
        pytest.param("tests/*_test.yaml", None, id="chart-as-committed"),
        pytest.param("tests/with-files/*_test.yaml", chart_with_fixture_files, id="with-files"),
        pytest.param("tests/without-files/*_test.yaml", chart_without_files, id="without-files"),
    ],
)
def test_every_helm_unittest_case_passes(pattern: str, make_chart: object, tmp_path: Path) -> None:
    chart = make_chart(tmp_path) if callable(make_chart) else CHART
    result = run_suites(chart, pattern, tmp_path)
    assert (result.failures, result.errors) == (0, 0), result.output
    assert result.tests == declared(pattern, chart) > 0, result.output


def test_a_failing_case_is_reported_as_a_failure(tmp_path: Path) -> None:
    chart = chart_without_files(tmp_path)
    (chart / "tests" / "broken_test.yaml").write_text(
        "suite: broken\ntemplates: [templates/deployment.yaml]\ntests:\n"
        "  - it: expects a replica count the chart does not set\n"
        "    asserts:\n      - equal: {path: spec.replicas, value: 7}\n"
    )
    result = run_suites(chart, "tests/broken_test.yaml", tmp_path)
    assert (result.tests, result.failures) == (1, 1), result.output
