"""The emulator's own settings, from ``SPECDEPLOY_EMULATED_*`` variables the stand-in sets.

``SPECDEPLOY_EMULATED_GPU``           the node's ``nvidia.com/gpu.product`` (unset: the
                                      preset's own GPU)
``SPECDEPLOY_EMULATED_PRESET``        a simulator preset name, instead of ``catalog.preset_for``
``SPECDEPLOY_EMULATED_TIME_SCALE``    wall seconds per modelled second (default 1.0, real
                                      time; tests use 0.01-0.1 to run 10-100x faster)
``SPECDEPLOY_EMULATED_LOAD_SECONDS``  the "model load" before ``/health`` turns 200
                                      (default 1.0 wall seconds, not scaled)

The pod's ``SPECDEPLOY_*`` add-on variables are the add-on's
(``vllm_addon/settings.py``). A value that does not parse stops the server at
start with a message naming the variable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

GPU = "SPECDEPLOY_EMULATED_GPU"
PRESET = "SPECDEPLOY_EMULATED_PRESET"
TIME_SCALE = "SPECDEPLOY_EMULATED_TIME_SCALE"
LOAD_SECONDS = "SPECDEPLOY_EMULATED_LOAD_SECONDS"
DEFAULT_LOAD_SECONDS = 1.0


class EmulatorConfigError(ValueError):
    """A ``SPECDEPLOY_EMULATED_*`` value that cannot be used; the message names it."""


@dataclass(frozen=True)
class EmulatorConfig:
    gpu: str | None = None
    preset: str | None = None
    time_scale: float = 1.0
    load_seconds: float = DEFAULT_LOAD_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EmulatorConfig:
        return cls(
            gpu=env.get(GPU, "").strip() or None,
            preset=env.get(PRESET, "").strip() or None,
            time_scale=_number(env, TIME_SCALE, 1.0, positive=True),
            load_seconds=_number(env, LOAD_SECONDS, DEFAULT_LOAD_SECONDS, positive=False),
        )


def _number(env: Mapping[str, str], name: str, default: float, *, positive: bool) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise EmulatorConfigError(f"{name}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise EmulatorConfigError(f"{name}: must be a finite number {bound}, got {text!r}")
    return value
