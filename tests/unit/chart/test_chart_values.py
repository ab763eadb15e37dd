"""values.yaml, values.schema.json and the values model agree, and the schema refuses typos."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import jsonschema
import pytest
import yaml

from specdeploy.chart import values
from tests.paths import ROOT

CHART = ROOT / "charts" / "specdeploy"


def _committed_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def _values_yaml() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return body


def test_the_schema_is_valid_draft_2020_12() -> None:
    schema = _committed_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_values_yaml_holds_exactly_the_models_defaults() -> None:
    assert _values_yaml() == values.defaults()


def test_values_yaml_validates_against_the_schema() -> None:
    jsonschema.Draft202012Validator(_committed_schema()).validate(_values_yaml())


def _with(path: str, value: object) -> dict[str, Any]:
    body = _values_yaml()
    node = body
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return body


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("replicaCont", 2, id="misspelt-top-level-key"),
        pytest.param("leaderElection.enabeld", False, id="misspelt-nested-key"),
        pytest.param("replicaCount", "two", id="count-as-text"),
        pytest.param("replicaCount", -1, id="negative-replicas"),
        pytest.param("watchNamespaces", ["Team_A"], id="namespace-not-a-dns-label"),
        pytest.param("watchNamespaces", ["team-a", "team-a"], id="namespace-twice"),
        pytest.param("operator.logLevel", "verbose", id="unknown-log-level"),
        pytest.param("operator.metricsPort", 70000, id="port-out-of-range"),
        pytest.param("monitoring.podMonitor.interval", "15 seconds", id="bad-duration"),
        pytest.param("image.pullPolicy", "sometimes", id="bad-pull-policy"),
        pytest.param("leaderElection.renewDeadline", 0, id="zero-deadline"),
    ],
)
def test_the_schema_refuses_a_bad_value(path: str, value: object) -> None:
    validator = jsonschema.Draft202012Validator(_committed_schema())
    assert not validator.is_valid(_with(path, value))


def test_the_namespaced_mode_and_custom_image_are_valid_values() -> None:
    body = _with("watchNamespaces", ["team-a", "team-b"])
    body["image"] = {"repository": "registry.example/specdeploy", "tag": "1.2.3"}
    jsonschema.Draft202012Validator(_committed_schema()).validate(body)
    assert values.ChartValues.model_validate(body).watch_namespaces == ["team-a", "team-b"]


def test_the_apps_version_is_the_packages_and_the_charts() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == package == chart["version"]


def test_the_default_image_is_what_the_operator_dockerfile_tags() -> None:
    dockerfile = (ROOT / "images" / "operator.Dockerfile").read_text()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f"-t {values.DEFAULT_IMAGE_REPOSITORY}:{chart['appVersion']} ." in dockerfile


def test_the_default_lease_is_the_operators() -> None:
    from specdeploy.cli.operator import DEFAULT_LEASE

    assert values.defaults()["leaderElection"]["id"] == DEFAULT_LEASE
