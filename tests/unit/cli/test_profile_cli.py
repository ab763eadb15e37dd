"""``specdeploy profile`` end to end: the sim profile, exit codes, termination messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdeploy.cli import main
from specdeploy.runtime.profile import Source, load_profile
from specdeploy.runtime.profiler import backend as backends
from specdeploy.runtime.profiler import run
from specdeploy.runtime.profiler.backend import ProfilerBackend
from specdeploy.runtime.profiler.exit_codes import ExitCode
from specdeploy.runtime.ranges import expand_lookup, schedule_problems, to_vllm, validate_vllm
from specdeploy.runtime.schedule import derive_schedule
from tests.paths import ROOT

OLD_PROFILES = ROOT / "tests" / "data" / "profiles"
SMALL = ["--batch-sizes", "1,4,16,64", "--steps", "16", "--progress-interval", "0"]


@pytest.fixture(autouse=True)
def _not_in_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KUBERNETES_SERVICE_HOST", "SPECDEPLOY_KUBE_API", "SPECDEPLOY_PROFILE_NAME"):
        monkeypatch.delenv(var, raising=False)


def _profile(tmp_path: Path, *args: str) -> tuple[int, Path]:
    log = tmp_path / "termination-log"
    return main(["profile", *args, "--termination-log", str(log)]), log


def test_sim_profile_derives_a_schedule_vllm_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, raw = tmp_path / "p.yaml", tmp_path / "raw.json"
    code, log = _profile(
        tmp_path, "--preset", "seed-dense", *SMALL, "--out", str(out), "--raw", str(raw)
    )
    assert code == 0, capsys.readouterr().err
    doc = load_profile(out)  # parse_profile: sorted rows, K=0 everywhere, acceptance covers K
    spec = doc.spec
    assert spec.source is Source.MODELLED and spec.fingerprint.engine == "vllm-sim"
    assert {m.batch_size for m in spec.measurements if m.k == 0} == {1, 4, 16, 64}
    assert doc.metadata.annotations is not None
    assert doc.metadata.annotations["specdeploy.io/profile-search"] == "smart"
    assert spec.schedule is not None
    assert list(spec.schedule) == derive_schedule(spec)
    assert list(schedule_problems(list(spec.schedule), max_k=spec.fingerprint.max_k)) == []
    table = validate_vllm(to_vllm(spec.schedule))
    lookup = expand_lookup(table, spec.fingerprint.max_k, 64)
    assert lookup[1] >= 3 and lookup[64] <= lookup[1]  # the seed's shape: K falls with load
    assert not log.exists()  # nothing to report on success
    raw_doc = json.loads(raw.read_text())
    assert len(raw_doc["cells"]) + len(raw_doc["contexts"]) == len(spec.measurements)
    assert raw_doc["contexts"], "the context axis is on by default"
    assert all(len(c["stepSeconds"]) >= 16 * c["repeats"] for c in raw_doc["cells"])
    err = capsys.readouterr().err
    assert err.count("specdeploy profile: ") >= len(spec.measurements)  # a line per cell
    assert f"written to {out}" in err.splitlines()[-1]


def test_exhaustive_search_measures_the_whole_grid(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    code, _ = _profile(
        tmp_path,
        "--preset",
        "llama8b-ngram-a100",
        *SMALL,
        "--search",
        "exhaustive",
        "--no-context-axis",
        "--min-repeats",
        "1",
        "--out",
        str(out),
    )
    assert code == 0
    cells = [(m.batch_size, m.k) for m in load_profile(out).spec.measurements]
    assert cells == [(bs, k) for bs in (1, 4, 16, 64) for k in range(6)]


def test_profile_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _profile(tmp_path, "--preset", "seed-moe", *SMALL, "--out", "-")
    assert code == 0
    assert capsys.readouterr().out.startswith("apiVersion: specdeploy.io/v1alpha1\n")


# --- deterministic failures: exit code and termination message --------------------


def _fails(tmp_path: Path, expected: ExitCode, needle: str, *args: str) -> None:
    code, log = _profile(tmp_path, *args)
    assert code == expected
    message = log.read_text()
    assert message.endswith("\n") and message.count("\n") == 1
    assert needle in message


def test_bad_flag_value_is_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        _profile(tmp_path, "--preset", "seed-dense", "--batch-sizes", "1,x", "--out", "-")
    assert info.value.code == ExitCode.INVALID_ARGUMENTS
    assert "invalid arguments: argument --batch-sizes" in (tmp_path / "termination-log").read_text()


def test_sim_without_a_preset_is_invalid_arguments(tmp_path: Path) -> None:
    _fails(tmp_path, ExitCode.INVALID_ARGUMENTS, "needs --preset", "--out", "-")


def test_unknown_preset_is_invalid_arguments(tmp_path: Path) -> None:
    _fails(tmp_path, ExitCode.INVALID_ARGUMENTS, "unknown preset", "--preset", "nope", "--out", "-")


def test_no_output_off_a_pod_is_invalid_arguments(tmp_path: Path) -> None:
    _fails(tmp_path, ExitCode.INVALID_ARGUMENTS, "give --out FILE", "--preset", "seed-dense")


def test_ci_outside_zero_one_is_invalid_arguments(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        ExitCode.INVALID_ARGUMENTS,
        "rel_ci",
        "--preset",
        "seed-dense",
        "--ci",
        "2",
        "--out",
        "-",
    )


def test_vllm_needs_a_draft_model_for_eagle(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        ExitCode.INVALID_ARGUMENTS,
        "needs --draft-model",
        "--backend",
        "vllm",
        "--model",
        "org/model",
        "--method",
        "eagle3",
        "--max-k",
        "3",
        "--dataset",
        str(_jsonl(tmp_path)),
        "--out",
        "-",
    )


def test_missing_model_path_is_model_not_found(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        ExitCode.MODEL_NOT_FOUND,
        "/nonexistent/model does not exist",
        "--backend",
        "vllm",
        "--model",
        "/nonexistent/model",
        "--max-k",
        "3",
        "--dataset",
        str(_jsonl(tmp_path)),
        "--out",
        "-",
    )


def test_smallest_batch_out_of_memory(tmp_path: Path) -> None:
    # The MI300X preset's KV cache holds 128 sequences.
    _fails(
        tmp_path,
        ExitCode.OUT_OF_MEMORY,
        "batch size 512 exceeds",
        "--preset",
        "llama70b-eagle3-mi300x",
        "--batch-sizes",
        "512,1024",
        "--out",
        "-",
    )


def test_oom_above_the_smallest_batch_drops_those_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.yaml"
    code, _ = _profile(
        tmp_path,
        "--preset",
        "llama70b-eagle3-mi300x",
        "--batch-sizes",
        "1,64,512",
        "--steps",
        "8",
        "--out",
        str(out),
    )
    assert code == 0
    assert max(m.batch_size for m in load_profile(out).spec.measurements) == 64
    assert "batch sizes >= 512 did not fit" in capsys.readouterr().err


def test_missing_dataset_file_is_dataset_unavailable(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        ExitCode.DATASET_UNAVAILABLE,
        "does not exist",
        "--backend",
        "vllm",
        "--model",
        "org/model",
        "--max-k",
        "3",
        "--dataset",
        str(tmp_path / "none.jsonl"),
        "--out",
        "-",
    )


def test_unimportable_vllm_backend_is_backend_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "VLLM_MODULE", "specdeploy.runtime.profiler._no_such_backend")
    _fails(
        tmp_path,
        ExitCode.BACKEND_UNAVAILABLE,
        "cannot be loaded",
        "--backend",
        "vllm",
        "--model",
        "org/model",
        "--max-k",
        "3",
        "--dataset",
        str(_jsonl(tmp_path)),
        "--out",
        "-",
    )


def test_an_unexpected_error_exits_1_as_transient(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(options: run.ProfileOptions) -> ProfilerBackend:
        raise ConnectionResetError("engine went away")

    monkeypatch.setattr(run, "make_backend", broken)
    _fails(tmp_path, ExitCode.TRANSIENT, "engine went away", "--preset", "seed-dense", "--out", "-")


def test_missing_termination_log_directory_is_skipped_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "no-such-dir" / "termination-log"
    code = main(["profile", "--preset", "nope", "--out", "-", "--termination-log", str(log)])
    assert code == ExitCode.INVALID_ARGUMENTS
    assert not log.parent.exists()
    assert "unknown preset" in capsys.readouterr().err


def _jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "Say hello."}\n', encoding="utf-8")
    return path


def test_sim_models_the_pools_gpu_type_when_given(tmp_path: Path) -> None:
    profiles = {}
    for gpu in ("NVIDIA-H200", "NVIDIA-A100-SXM4-80GB"):
        out = tmp_path / f"{gpu}.yaml"
        code, _ = _profile(
            tmp_path,
            "--preset",
            "llama8b-eagle3-h200",
            "--gpu-type",
            gpu,
            *SMALL,
            "--out",
            str(out),
        )
        assert code == 0
        profiles[gpu] = load_profile(out).spec
    assert profiles["NVIDIA-A100-SXM4-80GB"].fingerprint.gpu_type == "NVIDIA-A100-SXM4-80GB"
    itl = {
        gpu: next(m.itl_ms for m in spec.measurements if (m.batch_size, m.k) == (64, 0))
        for gpu, spec in profiles.items()
    }
    # 2.0 TB/s and 312 TFLOP/s against 4.8 TB/s and 989: the A100 is slower
    assert itl["NVIDIA-A100-SXM4-80GB"] > 1.5 * itl["NVIDIA-H200"]


def test_sim_with_an_unknown_gpu_type_is_invalid_arguments(tmp_path: Path) -> None:
    _fails(
        tmp_path, ExitCode.INVALID_ARGUMENTS, "--gpu-type", "--preset", "seed-dense",
        "--gpu-type", "NVIDIA-Imaginary-1", "--out", "-",
    )  # fmt: skip


def test_a_profile_re_derived_from_its_raw_file_is_the_same_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, raw = tmp_path / "p.yaml", tmp_path / "raw.json"
    code, _ = _profile(
        tmp_path, "--preset", "seed-dense", *SMALL, "--out", str(out), "--raw", str(raw)
    )
    assert code == 0
    again = tmp_path / "again.yaml"
    code, _ = _profile(tmp_path, "--from-raw", str(raw), "--out", str(again))
    assert code == 0, capsys.readouterr().err
    measured, rederived = load_profile(out), load_profile(again)
    assert rederived.spec == measured.spec
    assert rederived.metadata.name == measured.metadata.name
    assert "re-derived" in capsys.readouterr().err


def test_an_old_raw_file_takes_the_fingerprint_of_the_profile_it_rewrites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 2026-11-29 SmolLM2 raw file (the one shipped before issue 13's re-measurement,
    kept in tests/data) predates the reached counts and records no fingerprint.

    Under the one acceptance definition its acceptance is what the issue-12 note
    reported; under t-quantile intervals its cells (one or two repeats of one or
    two prompts) cannot tell K=3 from K=0 at batch size 1, where the old table
    ran K=3, and the tie rule says so.
    """
    old = OLD_PROFILES / "smollm2-135m-ngram-cpu-2026-11-29"
    out = tmp_path / "profile.yaml"
    out.write_text(old.with_suffix(".yaml").read_text())
    raw = str(old.with_suffix(".raw.json"))
    code, _ = _profile(tmp_path, "--from-raw", raw, "--out", str(out))
    assert code == 0, capsys.readouterr().err
    spec = load_profile(out).spec
    assert spec.source is Source.MEASURED
    assert spec.acceptance.per_position == (0.2165, 0.8272, 0.9123)
    assert spec.acceptance.drafting_rate == (0.2835, 1.0, 1.0)
    assert spec.schedule is not None and spec.schedule[0] == (1, 1, 0)


def test_re_deriving_without_an_output_or_a_fingerprint_is_invalid_arguments(
    tmp_path: Path,
) -> None:
    raw = str(OLD_PROFILES / "smollm2-135m-ngram-cpu-2026-11-29.raw.json")
    code, log = _profile(tmp_path, "--from-raw", raw)
    assert code == ExitCode.INVALID_ARGUMENTS and "needs --out" in log.read_text()
    code, log = _profile(tmp_path, "--from-raw", raw, "--out", str(tmp_path / "new.yaml"))
    assert code == ExitCode.INVALID_ARGUMENTS and "records no fingerprint" in log.read_text()
    (tmp_path / "bad.json").write_text("{")
    code, log = _profile(tmp_path, "--from-raw", str(tmp_path / "bad.json"), "--out", "-")
    assert code == ExitCode.INVALID_ARGUMENTS and "not valid JSON" in log.read_text()
