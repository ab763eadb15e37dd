"""The chart's generated files are fresh, and a stale one is caught (what CI fails on)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from specdeploy.chart import generate, rbac
from specdeploy.cli import main
from specdeploy.operator.builders.rbac import operator_cluster_role, operator_namespaced_roles
from tests.paths import ROOT

CHART = ROOT / "charts" / "specdeploy"


def test_the_committed_chart_matches_a_fresh_generation() -> None:
    assert generate.stale_files() == [], "run `specdeploy chart generate`"


@pytest.fixture
def chart_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    return copy


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda c: (c / generate.SCHEMA_FILE).write_text("{}\n"), id="edited-schema"),
        pytest.param(lambda c: (c / generate.RBAC_FILE).unlink(), id="missing-rbac-rules"),
        pytest.param(
            lambda c: (c / "crds" / "specdeploy.io_speculationprofiles.yaml").write_text("x: 1\n"),
            id="edited-crd-copy",
        ),
        pytest.param(lambda c: (c / "crds" / "old.yaml").write_text("x: 1\n"), id="foreign-crd"),
        pytest.param(
            lambda c: (c / "rules" / "specdeploy-alerts.yaml").write_text("groups: []\n"),
            id="edited-alerts",
        ),
        pytest.param(
            lambda c: (c / "dashboards" / "specdeploy-fleet.json").unlink(),
            id="missing-dashboard",
        ),
    ],
)
def test_each_kind_of_drift_is_reported_and_regeneration_repairs_it(
    chart_copy: Path, edit: object
) -> None:
    assert callable(edit)
    edit(chart_copy)
    assert len(generate.stale_files(chart_copy)) == 1
    generate.write(chart_copy)
    assert generate.stale_files(chart_copy) == []


def test_the_check_verb_exits_1_on_a_stale_chart_and_0_on_a_fresh_one(
    chart_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["chart", "generate", "--check", "--chart", str(chart_copy)]
    assert main(argv) == 0
    (chart_copy / generate.SCHEMA_FILE).write_text("{}\n")
    assert main(argv) == 1
    assert "values.schema.json: stale" in capsys.readouterr().err
    assert main(["chart", "generate", "--chart", str(chart_copy)]) == 0
    assert main(argv) == 0


def _rendered_rules(lease: str) -> dict[str, object]:
    """The tpl's definitions as Helm would render them for ``lease`` (a stand-in for
    `helm template`, which the cluster tests run for real)."""
    text = (CHART / generate.RBAC_FILE).read_text().replace(rbac.LEASE_EXPRESSION, f'"{lease}"')
    found = {}
    for name in rbac.rules(lease):
        body = text.split(f'{{{{- define "{name}" -}}}}\n', 1)[1].split("{{- end }}", 1)[0]
        found[name] = yaml.safe_load(body)
    return found


@pytest.mark.parametrize("lease", ["specdeploy-operator", "team-a.lease"])
def test_the_rule_definitions_are_the_builders_rules_for_any_lease(lease: str) -> None:
    role, reads = operator_namespaced_roles("ns", lease=lease)
    assert _rendered_rules(lease) == {
        rbac.CLUSTER_RULES: operator_cluster_role(lease=lease)["rules"],
        rbac.NAMESPACED_RULES: role["rules"],
        rbac.CLUSTER_READS_RULES: reads["rules"],
    }


def test_the_crd_copies_are_the_repositorys_crds() -> None:
    repo = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == repo
    for name in repo:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes()
