"""A profile made on one machine, served on another.

* ``pessimistic-profile``: the profile was made at half the compute (a
  throttled or shared GPU, the wrong clocks), the pods serve on the real
  preset. The machine is faster than the profile says, and faster at
  verifying extra tokens above all, so the table's K are too low at high
  batch; a policy that corrects step costs from live timings should find
  the higher K. Scored against the oracle over the last ``WINDOW`` of
  ``PESSIMISTIC_STEPS`` steps: "within 5,000 steps".
* ``slower-machine``: the serving hardware is uniformly 2x slower than the
  profiled one (every step takes twice as long: the ranking of K is
  unchanged), so the table stays right; a policy that corrects step costs
  must not be misled into switching.
* ``wrong-machine``: the serving machine verifies drafts ``STEEPER``x as
  dear as the profiled one (``StepCost.verify_slope``: the verified-token
  slope is 5x the profile's) while a step without drafts costs the same. It
  is what the never-a-loss issue measured on vLLM's CPU engine with a profile
  from an AVX-512 machine served on one without: a K=3 step that carried
  drafts took 160-320 ms against <= 80 ms for one that did not, and the
  add-on, whose live cost model could only rescale the profile's shape, ran
  K=3 at 0.77x plain decoding per step. No warm-up: scored over the last
  ``WRONG_MACHINE_WINDOW`` of ``WRONG_MACHINE_STEPS`` steps (converged within
  the first 2,000), against max(plain decoding, the best fixed K).

The oracle is the best fixed K on the serving machine per seed, run with a
table set, among the two K the true cost model ranks highest at that batch
size (``profiling.modelled_ranking``; simulating every K would triple the
run time for a choice the analytic ranking already makes). All figures are
modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.sim.compare import Comparison, PolicyResult, figures
from specdeploy.runtime.sim.engine import SimResult
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.profiling import modelled_ranking
from specdeploy.runtime.sim.scenario_common import (
    Figures,
    Progress,
    ScenarioOutput,
    over_seeds,
    window_tokens_per_s,
)
from specdeploy.runtime.sim.workload import ClosedLoop

PESSIMISTIC_STEPS = 5000
WINDOW = 1000
SLOWDOWN = 2.0
STEEPER = 5.0
WRONG_MACHINE_STEPS = 2000
WRONG_MACHINE_WINDOW = 1000


def half_compute(preset: Preset) -> Preset:
    """The preset on a GPU with half the dense FLOP/s (bandwidth unchanged)."""
    gpu = preset.gpu
    slow = replace(
        gpu,
        bf16_tflops=gpu.bf16_tflops / 2,
        fp8_tflops=None if gpu.fp8_tflops is None else gpu.fp8_tflops / 2,
    )
    return replace(preset, name=f"{preset.name}-half-compute", gpu=slow)


def uniformly_slower(preset: Preset, factor: float = SLOWDOWN) -> Preset:
    """The preset on a machine where every step takes ``factor`` times as long."""
    return replace(preset, name=f"{preset.name}-{factor:g}x-slower", time_scale=factor)


def steeper_verification(preset: Preset, factor: float = STEEPER) -> Preset:
    """The preset on a machine whose drafts cost ``factor`` times as much to verify."""
    return replace(preset, name=f"{preset.name}-verify-{factor:g}x", verify_slope=factor)


def _oracle(
    cmp: Comparison, workload: ClosedLoop, seed: int, steps: int, warmup_steps: int | None
) -> tuple[int, SimResult]:
    ranking = modelled_ranking(cmp.preset, (workload.concurrency,))[workload.concurrency]
    allowed = set(cmp.allowed_k())
    candidates = [k for k, _ in ranking if k in allowed][:2]
    runs = {
        k: cmp.run(
            FixedPolicy(k),
            workload,
            seed=seed,
            table=True,
            steps=steps,
            warmup_steps=warmup_steps,
            trace=True,
        )
        for k in candidates
    }
    best = max(runs, key=lambda k: runs[k].tokens_per_s)
    return best, runs[best]


def _mismatch(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    name: str,
    steps: int,
    window: int,
    progress: Progress,
    warmup_steps: int | None = None,
    **facts: Any,
) -> ScenarioOutput:
    """Every policy at every batch size, scored over the last ``window`` of ``steps`` too."""
    rows: list[PolicyResult] = []
    label = name.replace("-", " ")
    for bs in batch_sizes:
        workload = ClosedLoop(bs, cmp.preset.workload.prompt, cmp.preset.workload.output)

        def run_one(policy: str, seed: int, wl: ClosedLoop = workload) -> Figures:
            extra: dict[str, float | int | None] = {}
            if policy == "oracle":
                k, r = _oracle(cmp, wl, seed, steps, warmup_steps)
                extra["oracle_k"] = k
            else:
                r = cmp.run_named(
                    policy, wl, seed=seed, steps=steps, warmup_steps=warmup_steps, trace=True
                )
            assert r.trace is not None
            return figures(
                r, tokens_per_s_window=window_tokens_per_s(r.trace, steps - window), **extra
            )

        rows += over_seeds(
            cmp, policies, run_one, batch_size=bs, label=f"{label} BS {bs}: ", progress=progress
        )
    info: dict[str, Any] = {"name": name, "steps": steps, "window_steps": window, **facts}
    return rows, info


def compare_pessimistic_profile(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    *,
    progress: Progress = None,
) -> ScenarioOutput:
    """``cmp.profile`` must come from ``half_compute(cmp.preset)`` (the CLI makes it so)."""
    return _mismatch(
        cmp, batch_sizes, policies, "pessimistic-profile", PESSIMISTIC_STEPS, WINDOW, progress,
        profiled_on="half the dense compute of the serving GPU",
    )  # fmt: skip


def compare_slower_machine(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    *,
    progress: Progress = None,
) -> ScenarioOutput:
    """``cmp.preset`` must be ``uniformly_slower(profiled preset)`` (the CLI makes it so)."""
    steps = cmp.settings.steps
    window = min(WINDOW, steps // 2)
    return _mismatch(
        cmp, batch_sizes, policies, "slower-machine", steps, window, progress, slowdown=SLOWDOWN
    )


def compare_wrong_machine(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    *,
    progress: Progress = None,
) -> ScenarioOutput:
    """``cmp.preset`` must be ``steeper_verification(profiled preset)`` (the CLI makes it so)."""
    return _mismatch(
        cmp, batch_sizes, policies, "wrong-machine", WRONG_MACHINE_STEPS, WRONG_MACHINE_WINDOW,
        progress, warmup_steps=0, verify_slope=cmp.preset.verify_slope,
    )  # fmt: skip
