"""``specdeploy operator crds --apply --from DIR``: the chart's CRD upgrade hook's command."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from specdeploy.chart import crd_apply
from specdeploy.cli import main
from specdeploy.operator.clients import k8s
from specdeploy.runtime.kube.requests import APPLY_PATCH
from tests.paths import ROOT

CRDS = ROOT / "charts" / "specdeploy" / "crds"


class Recorder:
    """Stands in for the client: records each request; ``refuse`` answers that path 403."""

    def __init__(self, refuse: str | None = None) -> None:
        self.calls: list[tuple[str, str, str, tuple[tuple[str, str], ...]]] = []
        self.bodies: list[Any] = []
        self.refuse = refuse

    def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "", query: Any = ()
    ) -> dict[str, Any]:
        if self.refuse and path.endswith(self.refuse):
            raise k8s.ApiError(method, path, 403, b"forbidden")
        self.calls.append((method, path, content_type, tuple(query)))
        self.bodies.append(body)
        return {}


def test_the_charts_crds_load_as_two_crds() -> None:
    names = [c["metadata"]["name"] for c in crd_apply.load(CRDS)]
    assert names == ["speculationprofiles.specdeploy.io", "speculativedeployments.specdeploy.io"]


def test_each_crd_becomes_one_forced_server_side_apply_under_its_own_manager() -> None:
    recorder = Recorder()
    done = crd_apply.apply(recorder, crd_apply.requests_for(crd_apply.load(CRDS)))
    assert len(done) == 2
    for method, path, content_type, query in recorder.calls:
        assert method == "PATCH"
        assert path.startswith("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/")
        assert content_type == APPLY_PATCH
        assert dict(query) == {"fieldManager": crd_apply.FIELD_MANAGER, "force": "true"}
    assert [b["kind"] for b in recorder.bodies] == ["CustomResourceDefinition"] * 2


def test_a_directory_holding_something_else_is_refused_by_name(tmp_path: Path) -> None:
    shutil.copy(CRDS / "specdeploy.io_speculationprofiles.yaml", tmp_path)
    (tmp_path / "z.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(crd_apply.NotACrd, match=r"z\.yaml: a ConfigMap"):
        crd_apply.load(tmp_path)


def test_an_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(crd_apply.NotACrd, match=r"no \*\.yaml files"):
        crd_apply.load(tmp_path)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["operator", "crds", "--apply"], id="no-from"),
        pytest.param(["operator", "crds", "--apply", "--check", "--from", str(CRDS)], id="check"),
        pytest.param(["operator", "crds", "--apply", "--from", "/nonexistent"], id="no-such-dir"),
    ],
)
def test_bad_usage_exits_2_without_connecting(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_a: object, **_k: object) -> None:
        raise AssertionError("must not connect")

    monkeypatch.setattr(k8s, "connect", explode)
    assert main(argv) == 2


def test_the_command_applies_and_prints_each_crd_and_a_refusal_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(k8s, "connect", lambda *_a: recorder)
    assert main(["operator", "crds", "--apply", "--from", str(CRDS)]) == 0
    assert capsys.readouterr().out.count("apply CustomResourceDefinition") == 2

    monkeypatch.setattr(
        k8s, "connect", lambda *_a: Recorder(refuse="speculativedeployments.specdeploy.io")
    )
    assert main(["operator", "crds", "--apply", "--from", str(CRDS)]) == 1
    assert "403" in capsys.readouterr().err
