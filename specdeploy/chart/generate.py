"""Write the chart's generated files, or list the stale ones (what ``--check`` fails on).

Generated, never edited by hand (each from its one source):

* ``values.schema.json`` from ``values.ChartValues``;
* ``templates/_rbac-rules.tpl`` from ``operator.builders.rbac`` (``rbac``);
* ``crds/*.yaml``, copies of the repository's ``crds/`` (themselves generated
  from the API models by ``specdeploy operator crds``). Helm installs ``crds/``
  on first install only; the chart's upgrade hook applies the same files;
* ``rules/specdeploy-alerts.yaml`` from ``alerts`` (the PrometheusRule's spec);
* ``dashboards/*.json`` from ``dashboards`` (grafana-foundation-sdk, a dev
  dependency: imported only when generating, so the wheel's CLI runs without it).

Pure except ``write``.
"""

from __future__ import annotations

import json
from pathlib import Path

from specdeploy.chart import alerts, rbac, values

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdeploy"
CRDS = ROOT / "crds"
SCHEMA_FILE = "values.schema.json"
RBAC_FILE = "templates/_rbac-rules.tpl"


def outputs(crds: Path = CRDS) -> dict[str, str]:
    """Every generated file's path in the chart and its text."""
    files = {
        SCHEMA_FILE: json.dumps(values.schema(), indent=2) + "\n",
        RBAC_FILE: rbac.template(),
    }
    for crd in sorted(crds.glob("*.yaml")):
        files[f"crds/{crd.name}"] = crd.read_text()
    files.update(alerts.files())
    files.update(_dashboards())
    return files


def _dashboards() -> dict[str, str]:
    try:
        from specdeploy.chart import dashboards
    except ImportError as err:  # a wheel install without the dev extra
        raise RuntimeError(
            f"generating the dashboards needs grafana-foundation-sdk ({err}); "
            "run `make install` in a checkout"
        ) from err
    return dashboards.files()


def stale_files(chart: Path = CHART, crds: Path = CRDS) -> list[str]:
    """What differs from a fresh generation: missing, changed, or a CRD no longer generated."""
    wanted = outputs(crds)
    problems = [
        f"{chart / name}: {'missing' if not (chart / name).is_file() else 'stale'}"
        for name, text in wanted.items()
        if not (chart / name).is_file() or (chart / name).read_text() != text
    ]
    problems += [
        f"{found}: not generated (no such file in {crds})"
        for found in sorted((chart / "crds").glob("*"))
        if f"crds/{found.name}" not in wanted
    ]
    return problems


def write(chart: Path = CHART, crds: Path = CRDS) -> list[Path]:
    """Write every generated file (and drop CRDs no longer generated); returns what changed."""
    changed = []
    wanted = outputs(crds)
    for found in sorted((chart / "crds").glob("*")):
        if f"crds/{found.name}" not in wanted:
            found.unlink()
            changed.append(found)
    for name, text in wanted.items():
        path = chart / name
        if path.is_file() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        changed.append(path)
    return changed
