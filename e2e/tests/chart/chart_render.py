"""Render the chart with the real ``helm`` (the cluster unit's binary) for the chart tests.

The chart's ``rules/`` and ``dashboards/`` are written by other generators; where the
checkout has none yet, ``chart_with_files`` adds this folder's fixtures to a copy of the
chart so the PrometheusRule and the dashboard ConfigMaps still render (and once the real
files exist, those are what the tests render).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.localcluster.binaries import Binaries, repo_root

CHART = repo_root() / "charts" / "specdeploy"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
RULES = "rules/specdeploy-alerts.yaml"
MONITORING_APIS = tuple(
    f"monitoring.coreos.com/v1/{kind}"
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")
)
RELEASE = "sd"

Doc = dict[str, Any]


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; the API server and helm-unittest refuse them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"repeated keys {repeated}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


def load_all(text: str) -> list[Doc]:
    """The documents of a rendering (empty ones dropped), refusing repeated keys."""
    return [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d]


def helm() -> Path:
    return Binaries.for_checkout().path("helm")


def chart_with_files(tmp: Path) -> Path:
    """A copy of the chart holding a rules file and dashboards (the fixtures where it has none)."""
    copy = tmp / "specdeploy"
    shutil.copytree(CHART, copy)
    if not (copy / RULES).is_file():
        (copy / "rules").mkdir(exist_ok=True)
        shutil.copy(FIXTURES / RULES, copy / RULES)
    if not list((copy / "dashboards").glob("*.json")):
        (copy / "dashboards").mkdir(exist_ok=True)
        for board in (FIXTURES / "dashboards").glob("*.json"):
            shutil.copy(board, copy / "dashboards")
    return copy


@dataclass(frozen=True)
class Case:
    """One point of the values matrix: values to set, and which APIs the cluster serves."""

    values: Mapping[str, Any] = field(default_factory=dict)
    api_versions: Sequence[str] = ()


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm()), *args], capture_output=True, text=True, timeout=120)


def render(chart: Path, case: Case, *, namespace: str, tmp: Path) -> list[Doc]:
    """``helm template`` (hooks included) of ``chart`` for ``case``, as documents."""
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump(dict(case.values)))
    apis = [f"--api-versions={api}" for api in case.api_versions]
    done = run_helm("template", RELEASE, str(chart), "-n", namespace, "-f", str(values), *apis)
    assert done.returncode == 0, done.stderr
    return load_all(done.stdout)


def of_kind(docs: Sequence[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: Sequence[Doc], kind: str) -> Doc:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"{len(found)} {kind}s: {[d['metadata']['name'] for d in found]}"
    return found[0]


def is_hook(doc: Doc) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def installed(docs: Sequence[Doc]) -> list[Doc]:
    """The release's own objects, without the hooks (which Helm deletes once they succeed)."""
    return [d for d in docs if not is_hook(d)]


def operator_container(docs: Sequence[Doc]) -> Doc:
    container: Doc = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container
