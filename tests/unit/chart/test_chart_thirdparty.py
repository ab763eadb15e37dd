"""The committed third-party CRDs (e2e/thirdparty/crds) say where they came from, and it is go.mod.

They are generated once by ``e2e/thirdparty/crds.sh`` (controller-gen from the Go API
modules) rather than in CI; a version bump in go.mod without a regeneration fails here.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.paths import ROOT

HERE = ROOT / "e2e" / "thirdparty"
HEADER = re.compile(r"^# from (?P<module>\S+)@(?P<version>\S+) ", re.MULTILINE)
WANTED = {
    "monitoring.coreos.com": {"ServiceMonitor", "PodMonitor", "PrometheusRule"},
    "keda.sh": {"ScaledObject", "TriggerAuthentication"},
}


def _required() -> dict[str, str]:
    text = (HERE / "go.mod").read_text()
    return dict(re.findall(r"^\s+(\S+) (v\S+)(?: // indirect)?$", text, re.MULTILINE))


def _files() -> list[str]:
    return sorted(p.name for p in (HERE / "crds").glob("*.yaml"))


def test_the_kinds_the_chart_tests_need_are_there() -> None:
    kinds: dict[str, set[str]] = {}
    for name in _files():
        crd = yaml.safe_load((HERE / "crds" / name).read_text())
        assert crd["kind"] == "CustomResourceDefinition", name
        kinds.setdefault(crd["spec"]["group"], set()).add(crd["spec"]["names"]["kind"])
    for group, wanted in WANTED.items():
        assert wanted <= kinds.get(group, set()), group


@pytest.mark.parametrize("name", _files())
def test_each_file_names_the_module_version_go_mod_pins(name: str) -> None:
    found = HEADER.search((HERE / "crds" / name).read_text())
    assert found, f"{name}: no generation header (run e2e/thirdparty/crds.sh)"
    assert _required()[found["module"]] == found["version"], name
