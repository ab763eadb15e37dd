"""Two request classes with different acceptance in one batch: what does one K per batch cost?

vLLM verifies one K for the whole batch. When a batch mixes traffic the
drafter predicts well (class A: position 1 accepts ``A_FIRST``) with traffic
it does not (class B: ``B_FIRST``), half and half, the best uniform K is a
compromise; per-request K (adaptive verification, DSpark) could give each
class its own. This scenario reports the gap, with no target: it says how
much a per-request K would be worth in this model.

Policies: the table (from a profile made on the mixed traffic), adaptive,
``oracle`` (the best uniform fixed K per seed, run with a table set) and
``per-request`` (the best fixed K per class in hindsight, per seed, among
the uniform oracle's pair and the ``PAIRS`` pairs the cost model ranks
highest: ``oracles.class_ranking``). Beside the simulated figures, each
batch size reports the cost model's gain of the best pair over the best
uniform K for a batch holding the classes at their shares (what the review
computed analytically); in a closed loop the simulated gain is smaller,
because a class served faster leaves the batch sooner. All figures are
modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from specdeploy.runtime.sim.acceptance import Mixture, Profile
from specdeploy.runtime.sim.compare import Comparison, PolicyResult, best_fixed_k, figures
from specdeploy.runtime.sim.engine import SimResult
from specdeploy.runtime.sim.oracles import FixedClassK, class_ranking
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.scenario_common import Figures, Progress, ScenarioOutput, over_seeds
from specdeploy.runtime.sim.seeds import SeedFigures
from specdeploy.runtime.sim.workload import ClosedLoop

A_FIRST, B_FIRST, A_SHARE = 0.9, 0.5, 0.5
PER_REQUEST = "per-request"
PAIRS = 3


def mixture(preset: Preset) -> Mixture:
    """The preset's acceptance curve moved to ``A_FIRST`` and ``B_FIRST`` at position 1."""
    curve = Profile(tuple(preset.acceptance.nominal()))
    return Mixture((curve.scaled(A_FIRST), curve.scaled(B_FIRST)), (A_SHARE, 1.0 - A_SHARE))


def mixed_preset(preset: Preset) -> Preset:
    """The preset serving the mixed traffic (its profile is made on it)."""
    return replace(preset, name=f"{preset.name}-mixed", acceptance=mixture(preset))


def compare_mixed(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    *,
    progress: Progress = None,
) -> ScenarioOutput:
    """``cmp.preset`` must be ``mixed_preset(...)`` (the CLI makes it so)."""
    preset = cmp.preset
    if not isinstance(preset.acceptance, Mixture):
        raise ValueError("the mixed scenario needs a preset whose acceptance is a Mixture")
    mix = preset.acceptance
    names = [*policies, PER_REQUEST] if PER_REQUEST not in policies else list(policies)
    rows: list[PolicyResult] = []
    for bs in batch_sizes:
        rows += _at_batch_size(cmp, mix, bs, names, progress)
    info: dict[str, Any] = {
        "name": "mixed",
        "classes": [list(p.per_position) for p in mix.classes],
        "shares": list(mix.shares),
        "pooled_acceptance": list(mix.nominal()),
    }
    return rows, info


def _at_batch_size(
    cmp: Comparison, mix: Mixture, bs: int, names: Sequence[str], progress: Progress
) -> list[PolicyResult]:
    preset = cmp.preset
    workload = ClosedLoop(bs, preset.workload.prompt, preset.workload.output)
    ranking = class_ranking(
        preset.cost, mix, preset.proposal_model, cmp.allowed_k(), batch_size=bs,
        context=preset.mean_context,
    )  # fmt: skip
    best_uniform = max(g for ks, g in ranking if len(set(ks)) == 1)
    uniform_k: dict[int, tuple[int, SimResult]] = {}  # per seed, shared by both oracles

    def uniform(seed: int) -> tuple[int, SimResult]:
        if seed not in uniform_k:
            uniform_k[seed] = best_fixed_k(cmp, workload, seed=seed, table=True)
        return uniform_k[seed]

    def run_one(name: str, seed: int) -> Figures:
        if name == "oracle":
            k, r = uniform(seed)
            return figures(r, oracle_k=k)
        if name == PER_REQUEST:
            k, r = uniform(seed)
            runs = {(k,) * len(mix.classes): r}
            for ks, _ in ranking[:PAIRS]:
                if ks not in runs:
                    runs[ks] = cmp.run(FixedClassK(ks), workload, seed=seed, table=True)
            best = max(runs, key=lambda ks: runs[ks].tokens_per_s)
            return figures(runs[best], **{f"k_class_{i}": x for i, x in enumerate(best)})
        return figures(cmp.run_named(name, workload, seed=seed))

    def extra(name: str, runs: list[SeedFigures]) -> dict[str, Any]:
        if name != PER_REQUEST:
            return {}
        return {
            "modelled_gain_per_request": round(ranking[0][1] / best_uniform, 4),
            "modelled_best_pair": list(ranking[0][0]),
        }

    return over_seeds(
        cmp, names, run_one, batch_size=bs, label=f"mixed BS {bs}: ", progress=progress,
        extra=extra,
    )  # fmt: skip
