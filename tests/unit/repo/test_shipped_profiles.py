"""The measured profiles shipped in profiles/ are valid and carry their raw measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdeploy.runtime.profile import load_profile
from specdeploy.runtime.schedule import derive_schedule
from tests.paths import ROOT

PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))


def test_profiles_are_shipped() -> None:
    assert PROFILES, "profiles/ holds no measured profile"


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_a_shipped_profile_is_measured_valid_and_consistent(path: Path) -> None:
    doc = load_profile(path)
    spec = doc.spec
    assert spec.source == "measured"
    assert spec.fingerprint.engine and spec.fingerprint.engine_version
    assert spec.schedule is not None
    max_bs = max(m.batch_size for m in spec.measurements)
    assert list(spec.schedule) == derive_schedule(spec, max_bs)
    raw = json.loads(path.with_suffix(".raw.json").read_text())
    cells = {(m.batch_size, m.k) for m in spec.measurements}
    assert cells <= {(c["batchSize"], c["k"]) for c in raw["cells"]}
