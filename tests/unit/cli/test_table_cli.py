"""``specdeploy table`` through the real entry point (specdeploy.cli.main)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specdeploy.cli import main
from specdeploy.runtime.profile import load_profile, parse_profile, save_profile
from specdeploy.runtime.ranges import expand_lookup, format_schedule, from_vllm
from specdeploy.runtime.schedule import derive_schedule
from tests.paths import EXAMPLES, FIXTURES

FIXTURES = FIXTURES
EXAMPLE = EXAMPLES / "profile-example.yaml"
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def expectations(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.removeprefix("# expect: ") for line in lines if line.startswith("# expect: ")]


# --- derive ------------------------------------------------------------------------


def test_derive_prints_the_document_with_the_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", "derive", str(EXAMPLE)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    derived = parse_profile(yaml.safe_load(out))
    original = load_profile(EXAMPLE)
    assert derived.spec.schedule == tuple(derive_schedule(original.spec))
    assert derived.model_copy(update={"spec": original.spec}) == original
    assert derived.spec.measurements == original.spec.measurements


def test_derive_as_json_with_a_larger_max_batch_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["table", "derive", str(EXAMPLE), "--format", "json", "--max-batch-size", "512"]) == 0
    )
    schedule = json.loads(capsys.readouterr().out)["spec"]["schedule"]
    assert schedule[0][0] == 1 and schedule[-1][1] == 512


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_derive_of_an_invalid_file_exits_2_with_nothing_on_stdout(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["table", "derive", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines, "no problem reported"
    for expected in expectations(path):
        assert any(expected in line for line in lines), (expected, lines)
    assert all(line.startswith(f"{path}: ") for line in lines)


def test_derive_reports_every_problem_one_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load((FIXTURES / "profile-small.yaml").read_text())
    data["spec"]["measurements"][0]["itlMs"] = -1
    data["spec"]["acceptance"]["perPosition"] = [0.8, 2.0, -0.5]
    data["spec"]["bogus"] = 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["table", "derive", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    fields = [line.removeprefix(f"{bad}: ").split(":")[0] for line in err.splitlines()]
    assert fields == [
        "spec.measurements[0].itlMs",
        "spec.acceptance.perPosition[1]",
        "spec.acceptance.perPosition[2]",
        "spec.bogus",
    ]


def test_derive_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", "derive", str(tmp_path / "nope.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "<file>: cannot read" in err


def test_derive_with_max_k_zero_is_refused_because_vllm_needs_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load((FIXTURES / "profile-small.yaml").read_text())
    data["spec"]["fingerprint"]["maxK"] = 0
    data["spec"]["measurements"] = [m for m in data["spec"]["measurements"] if m["k"] == 0]
    data["spec"]["acceptance"]["perPosition"] = []
    path = tmp_path / "k0.yaml"
    path.write_text(yaml.safe_dump(data))
    # perPosition must have one entry: the file is invalid before any schedule is derived.
    assert main(["table", "derive", str(path)]) == 2
    assert capsys.readouterr().out == ""


# --- show --------------------------------------------------------------------------


def test_show_prints_itl_goodput_best_k_and_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", "show", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    spec = load_profile(EXAMPLE).spec
    assert "modelled" in out.splitlines()[0]
    assert "step time ITL (ms)" in out and "goodput (tokens/s per sequence" in out
    assert f"schedule (derived): {format_schedule(derive_schedule(spec))}" in out
    rows = [line.split() for line in out.splitlines() if line[:6].strip().isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 4, 8, 16, 32, 64, 128, 256] * 2
    itl_rows, goodput_rows = rows[:9], rows[9:]
    assert float(itl_rows[0][1]) == 6.40  # bs 1, K=0 as measured
    assert itl_rows[-1][-1] == "0" and goodput_rows[0][-1] == "5"  # best K per row
    assert goodput_rows[-1][1].endswith("*")  # K=0 is marked best at 256


def test_show_says_measured_and_prints_the_file_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = load_profile(FIXTURES / "profile-small.yaml").with_schedule([(1, 64, 1)])
    path = tmp_path / "p.yaml"
    save_profile(doc, path)
    assert main(["table", "show", str(path), "--max-batch-size", "128"]) == 0
    out = capsys.readouterr().out
    assert "measured on a real engine" in out.splitlines()[0]
    assert "schedule (in file): 1-64:1" in out
    assert format_schedule(derive_schedule(doc.spec, 128)) in out
    assert "    -" in out  # unavailable cells are shown as such


def test_show_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_png = tmp_path / "goodput.png"
    assert main(["table", "show", str(EXAMPLE), "--plot", str(out_png)]) == 0
    assert f"plot written to {out_png}" in capsys.readouterr().out
    data = out_png.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 20_000  # two panels with six curves, not an empty canvas
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    assert width > 2 * height > 500  # side by side panels


def test_show_plot_of_a_sparse_profile(tmp_path: Path) -> None:
    out_png = tmp_path / "small.png"
    assert (
        main(["table", "show", str(FIXTURES / "profile-small.yaml"), "--plot", str(out_png)]) == 0
    )
    assert out_png.read_bytes().startswith(PNG_MAGIC)


def test_show_of_an_invalid_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "invalid" / "zero-itl.yaml"
    assert main(["table", "show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "spec.measurements[1].itlMs" in err


# --- to-vllm -------------------------------------------------------------------------


def test_to_vllm_prints_the_json_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", "to-vllm", str(EXAMPLE)]) == 0
    table = json.loads(capsys.readouterr().out)
    spec = load_profile(EXAMPLE).spec
    assert table == [list(r) for r in derive_schedule(spec)]
    assert from_vllm(table, 5) == derive_schedule(spec)
    assert len(expand_lookup(table, 5, 256)) == 257


def test_to_vllm_prefers_the_files_schedule_unless_asked_to_derive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = load_profile(FIXTURES / "profile-small.yaml").with_schedule([(1, 8, 2), (9, 64, 0)])
    path = tmp_path / "p.yaml"
    save_profile(doc, path)
    assert main(["table", "to-vllm", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == [[1, 8, 2], [9, 64, 0]]
    assert main(["table", "to-vllm", str(path), "--derive"]) == 0
    assert json.loads(capsys.readouterr().out) == [list(r) for r in derive_schedule(doc.spec)]


# --- usage ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["table"],
        ["table", "frobnicate", str(EXAMPLE)],
        ["table", "show", str(EXAMPLE), "--max-batch-size", "0"],
        ["table", "derive"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().out == ""
