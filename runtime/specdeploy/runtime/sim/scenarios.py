"""The benchmark's scenarios beyond steady closed loops, one module each (all modelled).

* ``scenario_drift``: acceptance falls mid-run at a fixed batch size;
* ``scenario_oscillate``: the scheduled batch size swings around a table threshold;
* ``scenario_rollout``: an RL generation batch drains from 256 requests to one;
* ``scenario_phased``: an open loop whose rate changes every 10 s, arrivals paired;
* ``scenario_collapse``: acceptance drops to near zero;
* ``scenario_hardware``: a profile made at half compute (``pessimistic-profile``),
  served on a machine uniformly 2x slower (``slower-machine``), or on one that
  verifies drafts 5x as dear (``wrong-machine``);
* ``scenario_mixed``: two request classes with different acceptance in one batch;
* ``scenario_common``: running every policy on every seed.

Each returns ``(rows, info)``: one ``compare.PolicyResult`` per policy (and
batch size, where it has several) with per-seed figures, and the scenario's
description for the JSON.
"""

from __future__ import annotations

from specdeploy.runtime.sim.scenario_collapse import compare_collapse
from specdeploy.runtime.sim.scenario_drift import (
    compare_drift,
    drift_preset,
    drift_profiles,
    recovery_steps,
    windowed_ratio,
)
from specdeploy.runtime.sim.scenario_hardware import (
    compare_pessimistic_profile,
    compare_slower_machine,
    compare_wrong_machine,
    half_compute,
    steeper_verification,
    uniformly_slower,
)
from specdeploy.runtime.sim.scenario_mixed import compare_mixed, mixed_preset
from specdeploy.runtime.sim.scenario_oscillate import compare_oscillate, table_threshold
from specdeploy.runtime.sim.scenario_phased import compare_phased, phase_rates
from specdeploy.runtime.sim.scenario_rollout import compare_rollout

SCENARIOS = (
    "steady",
    "drift",
    "oscillate",
    "rollout",
    "phased",
    "collapse",
    "pessimistic-profile",
    "slower-machine",
    "wrong-machine",
    "mixed",
)

__all__ = [
    "SCENARIOS",
    "compare_collapse",
    "compare_drift",
    "compare_mixed",
    "compare_oscillate",
    "compare_pessimistic_profile",
    "compare_phased",
    "compare_rollout",
    "compare_slower_machine",
    "compare_wrong_machine",
    "drift_preset",
    "drift_profiles",
    "half_compute",
    "mixed_preset",
    "phase_rates",
    "recovery_steps",
    "steeper_verification",
    "table_threshold",
    "uniformly_slower",
    "windowed_ratio",
]
