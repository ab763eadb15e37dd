"""crds/ is generated from the API models, is structural, and carries the admission rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.operator import crdgen
from specdeploy.operator.api import SpeculativeDeploymentSpec
from tests.paths import ROOT

CRDS = ROOT / "crds"


def test_crds_directory_matches_the_models() -> None:
    assert crdgen.stale_files(CRDS) == [], "run `specdeploy operator crds`"


def test_a_stale_or_foreign_file_is_reported(tmp_path: Path) -> None:
    crdgen.write(tmp_path)
    (tmp_path / "specdeploy.io_speculationprofiles.yaml").write_text("edited\n")
    (tmp_path / "extra.yaml").write_text("x: 1\n")
    problems = crdgen.stale_files(tmp_path)
    assert len(problems) == 2


def schemas(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key in ("properties",):
            for name, child in (node.get(key) or {}).items():
                yield from schemas(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from schemas(node[key], f"{path}[]")


def crd_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for crd in (crdgen.speculative_deployment_crd(), crdgen.speculation_profile_crd()):
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        yield from schemas(root, crd["spec"]["names"]["kind"])


@pytest.mark.parametrize(
    ("path", "node"), list(crd_schemas()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_schema_node_is_structural(path: str, node: dict[str, Any]) -> None:
    assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
    assert not {"$ref", "anyOf", "oneOf", "allOf", "prefixItems", "title"} & node.keys(), path
    assert node.get("additionalProperties") is not False, path


def rules() -> list[str]:
    return [
        r["rule"] for _, node in crd_schemas() for r in node.get("x-kubernetes-validations", [])
    ]


@pytest.mark.parametrize(
    "needle", ["self.fixedK <= self.maxK", "self.min <= self.max", "has(self.draftModel)"]
)
def test_cross_field_checks_are_cel_rules(needle: str) -> None:
    assert any(needle in rule for rule in rules())


def test_both_crds_have_status_subresources_printer_columns_and_short_names() -> None:
    for crd, short in (
        (crdgen.speculative_deployment_crd(), "sdep"),
        (crdgen.speculation_profile_crd(), "specprofile"),
    ):
        version = crd["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        assert version["additionalPrinterColumns"]
        assert short in crd["spec"]["names"]["shortNames"]


def test_an_object_default_of_empty_expands_to_the_models_defaults() -> None:
    """The CRD defaults objects to {} and fields one by one; pydantic must agree."""
    minimal = {"model": {"name": "m"}, "speculation": {"method": "ngram", "maxK": 3}}
    spec = SpeculativeDeploymentSpec.model_validate(minimal)
    crd = crdgen.speculative_deployment_crd()
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]
    for section in ("profiling", "vllm", "telemetry"):
        fields = props[section]["properties"]
        defaults = {k: v["default"] for k, v in fields.items() if "default" in v}
        model = getattr(spec, section).model_dump(mode="json", by_alias=True, exclude_none=True)
        assert defaults == model, section


def test_the_example_is_a_speculative_deployment_the_models_accept() -> None:
    body = yaml.safe_load((ROOT / "examples" / "specdeploy.yaml").read_text())
    assert body["kind"] == "SpeculativeDeployment"
    SpeculativeDeploymentSpec.model_validate(body["spec"])


def test_cel_rules_on_defaulted_objects_guard_defaulted_fields_with_has() -> None:
    """The API server checks a ``default: {}`` against the object's rules before filling
    nested defaults; a rule reading a defaulted field without ``has()`` makes the CRD invalid
    (found against kube-apiserver 1.35)."""
    for path, node in crd_schemas():
        if node.get("default") != {}:
            continue
        defaulted = {k for k, v in (node.get("properties") or {}).items() if "default" in v}
        for rule in node.get("x-kubernetes-validations", []):
            for field in defaulted:
                if f"self.{field}" in rule["rule"]:
                    assert f"has(self.{field})" in rule["rule"], (path, rule["rule"])
