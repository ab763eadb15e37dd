"""prometheus-adapter's rules for the operator's wanted-replicas gauge: the shape the adapter
reads (its v0.12.0 config keys), the label-to-resource mapping of the metric contract, and a
metrics query that, with the adapter's template filled in, selects one object's series."""

from __future__ import annotations

import re

import yaml

from specdeploy.chart import adapter_rules as rules_module
from specdeploy.chart.adapter_rules import (
    DEPLOYMENT_LABEL,
    METRIC,
    NAMESPACE_LABEL,
    adapter_rules,
)
from specdeploy.operator.builders.scaler import WANTED_REPLICAS_METRIC
from specdeploy.operator.reactor.metrics import OperatorMetrics

# The keys of prometheus-adapter v0.12.0's pkg/config (yaml tags of DiscoveryRule and friends).
DOCUMENT_KEYS = {"rules", "resourceRules", "externalRules"}
RULE_KEYS = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery"}
RESOURCES_KEYS = {"template", "overrides", "namespaced"}
GROUP_RESOURCE_KEYS = {"group", "resource"}
NAME_KEYS = {"matches", "as"}


def _only_rule() -> dict[str, object]:
    document = adapter_rules()
    assert set(document) <= DOCUMENT_KEYS
    assert len(document["rules"]) == 1
    rule: dict[str, object] = document["rules"][0]
    return rule


def test_the_document_uses_only_keys_the_adapter_reads() -> None:
    rule = _only_rule()

    assert set(rule) <= RULE_KEYS
    resources = rule["resources"]
    assert isinstance(resources, dict) and set(resources) <= RESOURCES_KEYS
    for mapping in resources["overrides"].values():
        assert set(mapping) <= GROUP_RESOURCE_KEYS and mapping["resource"]
    name = rule["name"]
    assert isinstance(name, dict) and set(name) == NAME_KEYS


def test_the_series_query_selects_the_gauge_with_both_resource_labels_set() -> None:
    query = _only_rule()["seriesQuery"]

    assert query == f'{METRIC}{{{NAMESPACE_LABEL}!="",{DEPLOYMENT_LABEL}!=""}}'
    assert METRIC == "specdeploy_operator_pool_wanted_replicas"


def test_the_operator_exports_the_gauge_with_both_labels_the_rule_maps() -> None:
    metrics = OperatorMetrics()
    # Keyword labels: a gauge without exactly these label names raises here.
    metrics.wanted_replicas.labels(
        specdeploy_namespace="team-a",
        deployment="chat-h100",
        specdeploy_deployment="chat",
        specdeploy_pool="h100",
    ).set(3)

    samples = [
        sample
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == METRIC
    ]
    assert len(samples) == 1 and samples[0].value == 3
    assert {NAMESPACE_LABEL, DEPLOYMENT_LABEL} <= set(samples[0].labels)


def test_the_operators_hpa_asks_for_the_name_the_rule_exposes() -> None:
    assert _only_rule()["name"]["as"] == WANTED_REPLICAS_METRIC  # type: ignore[index]


def test_the_labels_map_to_the_namespace_and_the_pools_apps_deployment() -> None:
    overrides = _only_rule()["resources"]["overrides"]  # type: ignore[index]

    assert overrides == {
        "specdeploy_namespace": {"resource": "namespace"},
        "deployment": {"group": "apps", "resource": "deployment"},
    }


def test_the_exposed_name_is_the_metric_and_the_pattern_matches_nothing_else() -> None:
    name = _only_rule()["name"]
    pattern = re.compile(name["matches"])  # type: ignore[index]

    assert name["as"] == METRIC  # type: ignore[index]
    assert pattern.search(METRIC)
    assert not pattern.search(f"{METRIC}_total")
    assert not pattern.search(f"x_{METRIC}")


def test_the_filled_in_metrics_query_takes_the_max_of_one_objects_series() -> None:
    template = _only_rule()["metricsQuery"]
    assert isinstance(template, str)
    # What the adapter substitutes for an Object metric on deployment "chat-h100" in "team-a".
    filled = (
        template.replace("<<.Series>>", METRIC)
        .replace("<<.LabelMatchers>>", 'specdeploy_namespace="team-a",deployment="chat-h100"')
        .replace("<<.GroupBy>>", "deployment")
    )

    assert filled == (
        f'max({METRIC}{{specdeploy_namespace="team-a",deployment="chat-h100"}}) by (deployment)'
    )
    assert "<<" not in filled


def test_the_document_survives_yaml_as_the_adapters_config_file() -> None:
    assert yaml.safe_load(yaml.safe_dump(adapter_rules())) == adapter_rules()


def test_each_call_returns_a_fresh_document() -> None:
    first = adapter_rules()
    first["rules"].clear()

    assert rules_module.adapter_rules()["rules"]
