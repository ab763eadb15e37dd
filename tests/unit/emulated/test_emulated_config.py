"""The emulator's own environment, and what stops it at start."""

from __future__ import annotations

import pytest

from e2e.emulated.args import parse_args
from e2e.emulated.config import EmulatorConfig, EmulatorConfigError
from e2e.emulated.server import StartError, banner, build

ARGS = ["meta-llama/Llama-3.1-8B-Instruct", "--served-model-name=llama-8b", "--port=8123"]


def test_defaults_are_real_time_with_a_one_second_load() -> None:
    config = EmulatorConfig.from_env({})
    assert (config.gpu, config.preset, config.time_scale, config.load_seconds) == (
        None, None, 1.0, 1.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("SPECDEPLOY_EMULATED_TIME_SCALE", "0"),
        ("SPECDEPLOY_EMULATED_TIME_SCALE", "fast"),
        ("SPECDEPLOY_EMULATED_TIME_SCALE", "inf"),
        ("SPECDEPLOY_EMULATED_LOAD_SECONDS", "-1"),
    ],
)
def test_bad_values_name_the_variable(name: str, text: str) -> None:
    with pytest.raises(EmulatorConfigError, match=name):
        EmulatorConfig.from_env({name: text})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SPECDEPLOY_EMULATED_GPU": "NVIDIA-T4"}, "unknown GPU 'NVIDIA-T4'"),
        ({"SPECDEPLOY_EMULATED_PRESET": "nope"}, "unknown preset 'nope'"),
        ({"SPECDEPLOY_EMULATED_TIME_SCALE": "-2"}, "SPECDEPLOY_EMULATED_TIME_SCALE"),
    ],
)
def test_what_the_simulator_cannot_model_stops_the_start(env: dict[str, str], message: str) -> None:
    with pytest.raises(StartError, match=message):
        build(parse_args(ARGS), env)


def test_the_banner_says_emulated_preset_gpu_and_timings() -> None:
    args = parse_args(ARGS)
    built = build(args, {"SPECDEPLOY_EMULATED_GPU": "NVIDIA-A100-SXM4-80GB",
                         "SPECDEPLOY_EMULATED_TIME_SCALE": "0.5"})  # fmt: skip
    line = banner(args, built)
    assert line.startswith("EMULATED vLLM meta-llama/Llama-3.1-8B-Instruct")
    assert "simulator preset" in line and "on GPU NVIDIA-A100-SXM4-80GB x1" in line
    assert "modelled timings (time scale 0.5)" in line
    assert "http://127.0.0.1:8123" in line
