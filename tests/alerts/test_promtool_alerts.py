"""The chart's alerts under Prometheus 3's own rule engine: promtool check rules and test rules.

Why promtool and not a PromQL re-implementation: the cases in
``specdeploy-alerts.test.yaml`` are evaluated exactly as a Prometheus 3.16
server would (left-open range selectors, ``for`` timing, staleness, template
rendering of the annotations). promtool comes from the local cluster's
binaries (``e2e/build/build.sh prometheus``, part of ``make cluster-bins``);
where it is missing these tests fail, naming that command.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.localcluster.binaries import Binaries, BinariesMissing
from specdeploy.chart import alerts
from tests.paths import ROOT

HERE = Path(__file__).resolve().parent
CASES = HERE / "specdeploy-alerts.test.yaml"
RULES = ROOT / "charts" / "specdeploy" / alerts.RULES_FILE


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return Binaries.for_checkout().path("promtool")
    except BinariesMissing as err:
        pytest.fail(f"{err}; `e2e/build/build.sh prometheus` builds promtool alone")


def run(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_file_passes_promtool_check_rules(promtool: Path) -> None:
    done = run(promtool, "check", "rules", RULES)

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in done.stdout


def test_every_alert_fires_and_stays_quiet_as_its_cases_say(promtool: Path) -> None:
    done = run(promtool, "test", "rules", CASES)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_cases_catch_a_slower_alert_firing_a_minute_early(
    promtool: Path, tmp_path: Path
) -> None:
    # The same cases against rules whose 10-minute `for` became 8 minutes: the 9-minute
    # case must fail, or the boundary is not tested.
    early = RULES.read_text().replace(f"for: {alerts.SLOWER_FOR}", "for: 8m", 1)
    assert early != RULES.read_text()
    (tmp_path / "rules.yaml").write_text(early)
    cases = yaml.safe_load(CASES.read_text())
    cases["rule_files"] = ["rules.yaml"]
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump(cases))

    done = run(promtool, "test", "rules", tmp_path / "cases.yaml")

    assert done.returncode != 0, done.stdout
    assert "SpecdeploySpeculationSlowerThanPlain" in done.stdout + done.stderr
