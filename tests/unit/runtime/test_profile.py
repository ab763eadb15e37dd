"""Loading, validating and saving SpeculationProfiles: every bad input names its field."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specdeploy.runtime.profile import (
    Fingerprint,
    ProfileError,
    Source,
    dump_profile,
    load_profile,
    parse_profile,
    save_profile,
)
from tests.paths import EXAMPLES, FIXTURES

FIXTURES = FIXTURES
EXAMPLE = EXAMPLES / "profile-example.yaml"
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))

# A problem starts with the path of the field it is about.
FIELD = re.compile(r"^(<document>|<file>|apiVersion|kind|metadata|spec)[.\[:]")


def expectations(path: Path) -> list[str]:
    """The ``# expect: ...`` header lines of an invalid fixture."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.removeprefix("# expect: ") for line in lines if line.startswith("# expect: ")]


def small_document() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((FIXTURES / "profile-small.yaml").read_text())
    return data


def problems_of(data: Any) -> list[str]:
    with pytest.raises(ProfileError) as err:
        parse_profile(data)
    return err.value.problems


# --- valid documents ---------------------------------------------------------


def test_the_example_is_a_modelled_profile_without_schedule() -> None:
    doc = load_profile(EXAMPLE)
    spec = doc.spec
    assert spec.source is Source.MODELLED
    assert spec.schedule is None
    assert spec.fingerprint.max_k == 5
    assert spec.acceptance.per_position == (0.81, 0.69, 0.58, 0.49, 0.41)
    assert sorted({m.batch_size for m in spec.measurements}) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert all(m.samples > 1 for m in spec.measurements)
    assert doc.metadata.name == f"p-{spec.fingerprint.digest()}"


def test_the_small_fixture_loads() -> None:
    doc = load_profile(FIXTURES / "profile-small.yaml")
    assert doc.spec.source is Source.MEASURED
    assert len(doc.spec.measurements) == 9


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_dump_then_parse_is_the_identity(fmt: str) -> None:
    doc = load_profile(EXAMPLE).with_schedule([(1, 16, 4), (17, 64, 2), (65, 256, 0)])
    text = dump_profile(doc, fmt=fmt)
    assert parse_profile(yaml.safe_load(text)) == doc


def test_dump_uses_camel_case_and_leaves_unset_fields_out() -> None:
    text = dump_profile(load_profile(FIXTURES / "profile-small.yaml"))
    data = yaml.safe_load(text)
    assert "batchSize" in data["spec"]["measurements"][0]
    assert "acceptanceLength" not in data["spec"]["measurements"][0]
    assert "schedule" not in data["spec"]


def test_save_writes_atomically_and_reloads(tmp_path: Path) -> None:
    doc = load_profile(EXAMPLE)
    out = tmp_path / "p.yaml"
    save_profile(doc, out)
    assert load_profile(out) == doc
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]  # no temp file left


def test_dump_refuses_an_invalid_profile() -> None:
    doc = load_profile(FIXTURES / "profile-small.yaml").with_schedule([(1, 8, 9)])
    with pytest.raises(ProfileError, match=r"spec\.schedule\[0\]: k=9 exceeds maxK=3"):
        dump_profile(doc)


def test_fingerprint_digest_is_stable_and_sensitive() -> None:
    fp = load_profile(EXAMPLE).spec.fingerprint
    assert fp.digest() == Fingerprint.model_validate(fp.model_dump()).digest()
    assert fp.digest() != fp.model_copy(update={"max_k": 4}).digest()
    assert re.fullmatch(r"[0-9a-f]{16}", fp.digest())


# --- invalid documents ---------------------------------------------------------


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_each_invalid_fixture_is_rejected_naming_the_field(path: Path) -> None:
    expected = expectations(path)
    assert expected, f"{path.name} has no '# expect:' line"
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    problems = err.value.problems
    for text in expected:
        assert any(text in p for p in problems), (text, problems)
    for problem in problems:
        assert FIELD.match(problem), problem
    assert str(path) in str(err.value)


def test_the_invalid_fixtures_cover_the_required_cases() -> None:
    names = {p.stem for p in INVALID}
    assert {
        "missing-baseline-cell",
        "missing-itl",
        "zero-itl",
        "negative-itl",
        "acceptance-above-one",
        "acceptance-negative",
        "unsorted-rows",
        "duplicate-row",
        "k-above-max-k",
        "not-a-mapping",
        "unknown-field",
    } <= names


def test_every_problem_is_reported_at_once() -> None:
    data = small_document()
    data["spec"]["measurements"][2]["itlMs"] = 0
    data["spec"]["acceptance"]["perPosition"] = [0.8, 1.5, 0.4]
    data["spec"]["extra"] = True
    problems = problems_of(data)
    assert any(p.startswith("spec.measurements[2].itlMs") for p in problems)
    assert any(p.startswith("spec.acceptance.perPosition[1]") for p in problems)
    assert any(p.startswith("spec.extra") for p in problems)


def test_semantic_problems_are_all_reported_too() -> None:
    data = small_document()
    rows = data["spec"]["measurements"]
    rows.insert(1, dict(rows[0]))  # duplicate (1, 0)
    rows.append({"batchSize": 64, "k": 5, "itlMs": 30.0})  # above maxK and acceptance
    problems = problems_of(data)
    assert any("spec.measurements[1]: duplicate cell batchSize=1 k=0" in p for p in problems)
    assert any(p.startswith("spec.measurements[10].k: 5 exceeds") for p in problems)
    assert any("spec.acceptance.perPosition: has 3 positions" in p for p in problems)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "<document>: expected a mapping, got list"),
        (None, "<document>: expected a mapping, got NoneType"),
        (42, "<document>: expected a mapping, got int"),
        ("spec", "<document>: expected a mapping, got str"),
    ],
)
def test_non_mapping_documents(data: Any, expected: str) -> None:
    assert problems_of(data) == [expected]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("spec", "measurements", 0, "itlMs"), -1.0, "spec.measurements[0].itlMs"),
        (("spec", "measurements", 0, "itlMs"), float("nan"), "spec.measurements[0].itlMs"),
        (("spec", "measurements", 0, "batchSize"), 0, "spec.measurements[0].batchSize"),
        (("spec", "measurements", 0, "k"), -1, "spec.measurements[0].k"),
        (("spec", "measurements", 0, "samples"), 0, "spec.measurements[0].samples"),
        (("spec", "measurements", 1, "acceptanceLength"), 0.5, "spec.measurements[1]."),
        (("spec", "acceptance", "perPosition"), [], "spec.acceptance.perPosition"),
        (("spec", "measurements"), [], "spec.measurements"),
        (("spec", "fingerprint", "maxK"), -1, "spec.fingerprint.maxK"),
        (("spec", "fingerprint", "model"), "", "spec.fingerprint.model"),
        (("spec", "source"), "guessed", "spec.source"),
        (("kind", ), "Profile", "kind: must be 'SpeculationProfile'"),
        (("spec", "schedule"), [], "spec.schedule: must not be empty"),
        (("spec", "schedule"), [[1, 64]], "spec.schedule[0]"),
    ],
)  # fmt: skip
def test_bad_fields_are_named(path: tuple[str | int, ...], value: Any, expected: str) -> None:
    data = small_document()
    target: Any = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    problems = problems_of(data)
    assert any(p.startswith(expected) for p in problems), problems


def test_a_missing_required_field_is_named() -> None:
    data = small_document()
    del data["spec"]["acceptance"]
    assert problems_of(data) == ["spec.acceptance: Field required"]


def test_unreadable_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="<file>: cannot read"):
        load_profile(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [1, 2\n")
    with pytest.raises(ProfileError, match="<file>: not valid YAML/JSON"):
        load_profile(bad)


@given(st.data())
def test_any_duplicated_row_is_rejected_at_its_index(data: st.DataObject) -> None:
    doc = small_document()
    rows = doc["spec"]["measurements"]
    i = data.draw(st.integers(0, len(rows) - 1))
    rows.insert(i + 1, copy.deepcopy(rows[i]))
    problems = problems_of(doc)
    assert any(p.startswith(f"spec.measurements[{i + 1}]: duplicate cell") for p in problems)


@given(st.data())
def test_any_swapped_pair_of_rows_is_rejected_as_unsorted(data: st.DataObject) -> None:
    doc = small_document()
    rows = doc["spec"]["measurements"]
    i = data.draw(st.integers(0, len(rows) - 2))
    rows[i], rows[i + 1] = rows[i + 1], rows[i]
    problems = problems_of(doc)
    assert any(p.startswith(f"spec.measurements[{i + 1}]: rows must be sorted") for p in problems)


@given(st.floats(allow_nan=False).filter(lambda x: not 0.0 <= x <= 1.0), st.integers(0, 2))
def test_acceptance_outside_unit_interval_is_rejected(rate: float, position: int) -> None:
    doc = small_document()
    doc["spec"]["acceptance"]["perPosition"][position] = rate
    problems = problems_of(doc)
    assert any(p.startswith(f"spec.acceptance.perPosition[{position}]") for p in problems)


@given(st.floats(max_value=0.0, allow_nan=False), st.integers(0, 8))
def test_non_positive_step_times_are_rejected(itl: float, row: int) -> None:
    doc = small_document()
    doc["spec"]["measurements"][row]["itlMs"] = itl
    problems = problems_of(doc)
    assert any(p.startswith(f"spec.measurements[{row}].itlMs") for p in problems)
