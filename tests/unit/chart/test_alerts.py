"""The chart's alerts as data: the committed rules file is fresh, every alert is complete,
every metric an expression reads is one the project exports, and every alert has promtool
cases firing and not firing (tests/alerts runs them)."""

from __future__ import annotations

import re

import pytest
import yaml
from prometheus_client import CollectorRegistry

from specdeploy.chart import alerts
from specdeploy.operator.reactor.metrics import OperatorMetrics
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics
from tests.paths import ROOT

CHART = ROOT / "charts" / "specdeploy"
CASES = ROOT / "tests" / "alerts" / "specdeploy-alerts.test.yaml"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
PROMQL_WORDS = {"sum", "avg", "max", "by", "rate", "increase", "or", "and", "time", "absent"}
POOL_ALERTS = {
    "SpecdeploySpeculationSlowerThanPlain",
    "SpecdeployAcceptanceCollapse",
    "SpecdeployTableReloadErrors",
    "SpecdeployProfilingFailed",
}


def exported(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry's families can have (labelled or not, set or not)."""
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def metric_names(expr: str) -> set[str]:
    """The series names an expression selects (identifiers before a ``{``)."""
    return {m for m in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr) if m not in PROMQL_WORDS}


def test_the_file_is_a_rules_file_of_the_alerts_in_order() -> None:
    ((path, text),) = alerts.files().items()
    doc = yaml.safe_load(text)

    assert path == "rules/specdeploy-alerts.yaml"
    (group,) = doc["groups"]
    assert [r["alert"] for r in group["rules"]] == [a.name for a in alerts.ALERTS]


@pytest.mark.parametrize("alert", alerts.ALERTS, ids=lambda a: a.name)
def test_every_alert_waits_has_a_severity_and_says_where_and_what_to_do(
    alert: alerts.Alert,
) -> None:
    rule = alert.rule()

    assert re.fullmatch(r"[1-9][0-9]*m", rule["for"])
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert set(rule["annotations"]) == {"summary", "description"}
    assert "Runbook: " in rule["annotations"]["description"]
    if alert.name in POOL_ALERTS:
        assert "{{ $labels.specdeploy_pool }}" in rule["annotations"]["summary"]


def test_every_series_an_alert_reads_is_exported_by_the_add_on_or_the_operator() -> None:
    known = exported(AddonMetrics("pool", 3).registry) | exported(OperatorMetrics().registry)
    known.add("up")  # Prometheus's own, per target

    used = {name for a in alerts.ALERTS for name in metric_names(a.expr)}

    assert used, "the expressions select no series: the name pattern is wrong"
    assert used - known == set()


def test_the_slower_alert_waits_the_ten_minutes_the_issue_asks_for() -> None:
    (slower,) = [a for a in alerts.ALERTS if a.name == "SpecdeploySpeculationSlowerThanPlain"]

    assert slower.for_ == "10m"
    assert "specdeploy_predicted_gain_over_vanilla" in slower.expr


@pytest.mark.parametrize("alert", alerts.ALERTS, ids=lambda a: a.name)
def test_every_alert_has_promtool_cases_firing_and_not_firing(alert: alerts.Alert) -> None:
    cases = yaml.safe_load(CASES.read_text())
    mine = [
        case
        for test in cases["tests"]
        for case in test.get("alert_rule_test", ())
        if case["alertname"] == alert.name
    ]

    assert any(case.get("exp_alerts") for case in mine), "no case where it fires"
    assert any(not case.get("exp_alerts") for case in mine), "no case where it stays quiet"
