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


MIN_PROMPTS_PER_CELL = 30


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_a_shipped_profile_rests_on_enough_prompts_a_baseline_and_intervals(path: Path) -> None:
    """Issue 13: a measured cell of one or two prompts ranks prompts, not K. Every
    cell decoded >= 30 distinct prompts, records its step time's interval, and the
    profile measured plain decoding at every batch size it measured K at."""
    spec = load_profile(path).spec
    for m in spec.measurements:
        assert m.prompts is not None and m.prompts >= MIN_PROMPTS_PER_CELL, m
        assert m.itl_half_width_ms is not None and m.itl_half_width_ms > 0, m
    sizes = {m.batch_size for m in spec.measurements}
    assert {b.batch_size for b in spec.baseline} == sizes
    assert all(b.itl_half_width_ms is not None for b in spec.baseline)
    raw = json.loads(path.with_suffix(".raw.json").read_text())
    for cell in raw["cells"]:
        assert len(cell["prompts"]) >= MIN_PROMPTS_PER_CELL
        assert cell["halfWidthMs"] > 0 and cell["repeats"] >= 1
