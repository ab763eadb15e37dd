"""K policies side by side on one simulated replica: the numbers behind ``specdeploy simulate``.

Every figure here is *modelled* (simulator), never measured.

Policies by name:

* ``vanilla``   no speculation configured at all (no drafter cost, full graphs);
* ``fixed:N``   K = N on every step (vLLM's static ``num_speculative_tokens``,
                full CUDA graphs);
* ``table``     the static schedule derived from the preset's (modelled)
                profile, looked up by the raw batch size like vLLM does;
* ``adaptive``  specdeploy's policy, seeded with the same profile, choosing
                among the K the pod's table starts with plus 0 (the add-on's
                K set: the table's values are the engine's graph shapes);
* ``specdeploy`` the product: the operator's plain-decoding floor
                (``floor.judge`` on the same profile) and, where it predicts
                speculation wins, ``adaptive``. Judged at the batch size a
                closed loop runs (a pool serving only that load), otherwise
                at the profiled sizes, as the operator does today;
* ``oracle``    the best K in hindsight (per batch size, per phase, or per
                step from the true cost: each scenario says which).

``table`` and ``adaptive`` set a K table; on vLLM's V1 model runner that
forces piecewise CUDA graphs and their per-layer cost (``step_time.py``,
``Preset.runner``); vanilla and fixed K never pay it. Oracles set a table
too: an oracle measures the *choice* of K on the platform a table-driven pod
runs, not the platform.

Every policy runs on the same seeds (``seeds.py``): per seed the same
request lengths, arrivals and acceptance draws (common random numbers), so
differences between policies are differences in K, not luck, and the spread
across seeds says how large a difference must be to mean anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdeploy.runtime.floor import FloorVerdict, judge
from specdeploy.runtime.policy import AdaptivePolicy, TablePolicy
from specdeploy.runtime.policy.static import FixedPolicy, static_lookup
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.sim.engine import AnyPolicy, SimResult
from specdeploy.runtime.sim.oracles import StateOracle
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.seeds import DEFAULT_SEEDS, SeedFigures, spreads
from specdeploy.runtime.sim.workload import ClosedLoop, Workload

BASE_POLICIES = ("vanilla", "table", "adaptive", "specdeploy", "oracle")
TABLE_POLICIES = frozenset({"table", "adaptive", "oracle"})
"""Policies that set a K table (on the V1 runner: piecewise CUDA graphs)."""


@dataclass(frozen=True)
class PolicyResult:
    """One row of the comparison: a policy at one batch size (or in one scenario), all seeds.

    The headline figures are means over ``per_seed``; ``record`` adds the
    spread of every per-seed metric.
    """

    policy: str
    batch_size: float
    per_seed: tuple[SeedFigures, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def mean(self, metric: str) -> float:
        return spreads(self.per_seed)[metric].mean

    @property
    def tokens_per_s(self) -> float:
        return self.mean("tokens_per_s")

    @property
    def mean_k(self) -> float:
        return self.mean("mean_k")

    @property
    def k_changes_per_1000_steps(self) -> float:
        return self.mean("k_changes_per_1000_steps")

    def record(self) -> dict[str, Any]:
        """The JSON record scripts rely on (extra keys come after the contract's)."""
        spread = spreads(self.per_seed)
        return {
            "policy": self.policy,
            "batch_size": round(self.batch_size, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "mean_k": round(self.mean_k, 4),
            "k_changes_per_1000_steps": round(self.k_changes_per_1000_steps, 3),
            "seeds": [r.seed for r in self.per_seed],
            "spread": {name: s.record() for name, s in spread.items()},
            "per_seed": [r.record() for r in self.per_seed],
            **self.extra,
        }


def figures(r: SimResult, **extra: float | int | None) -> dict[str, float | int | None]:
    """The per-seed figures every scenario reports, plus its own."""
    return {
        "tokens_per_s": r.tokens_per_s,
        "mean_k": r.mean_k,
        "k_changes_per_1000_steps": r.k_changes_per_1000_steps,
        "mean_batch_size": r.mean_batch_size,
        **extra,
    }


@dataclass(frozen=True)
class RunSettings:
    """How long each run is, and its seeds."""

    steps: int = 3000
    warmup_steps: int = 300
    seeds: tuple[int, ...] = DEFAULT_SEEDS

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("seeds: at least one")


def parse_policies(text: str, *, max_k: int) -> list[str]:
    """Validate a comma-separated policy list; errors name the bad entry."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ValueError("--policies: empty list")
    for name in names:
        if name in BASE_POLICIES:
            continue
        if name.startswith("fixed:"):
            value = name.removeprefix("fixed:")
            if not value.isdigit() or not 0 <= int(value) <= max_k:
                raise ValueError(f"--policies: {name!r} needs an integer K in 0..maxK={max_k}")
            continue
        raise ValueError(
            f"--policies: unknown policy {name!r}; "
            "use vanilla, fixed:N, table, adaptive, specdeploy, oracle"
        )
    if len(set(names)) != len(names):
        raise ValueError("--policies: a policy is listed twice")
    return names


@dataclass(frozen=True)
class Comparison:
    """One preset (the serving machine), a modelled profile, and how to run any policy."""

    preset: Preset
    profile: SpeculationProfile
    settings: RunSettings = RunSettings()

    def build(self, name: str) -> AnyPolicy | None:
        """A fresh policy (policies learn, so never share one between runs)."""
        if name == "vanilla":
            return None
        if name.startswith("fixed:"):
            return FixedPolicy(int(name.removeprefix("fixed:")))
        if name == "table":
            return TablePolicy.from_profile(self.profile, max_batch_size=self.preset.max_batch_size)
        if name == "adaptive":
            return AdaptivePolicy.from_profile(
                self.profile, max_batch_size=self.preset.max_batch_size, allowed_k=self.pod_k()
            )
        raise ValueError(f"no single policy is called {name!r}")

    def pod_k(self) -> list[int]:
        """The K a pod started with this profile's table may run: the table's K and 0.

        The add-on keeps K inside the K set of the table vLLM started with (the
        engine's CUDA-graph shapes); the operator adds 0 (``SPECDEPLOY_ALLOWED_K``)
        so a pod can always fall to the floor.
        """
        lookup = static_lookup(self.profile.spec, self.preset.max_batch_size)
        return sorted({0, *lookup[1:]})

    def floor(self, workload: Workload) -> FloorVerdict:
        """The operator's plain-decoding verdict for a pool serving ``workload``."""
        if isinstance(workload, ClosedLoop):
            served = [workload.concurrency]
        else:
            served = sorted({m.batch_size for m in self.profile.spec.measurements})
        return judge(self.profile.spec, served)

    def resolve(self, name: str, workload: Workload) -> str:
        """The policy a pod runs: ``specdeploy`` is vanilla or adaptive, by the floor."""
        if name != "specdeploy":
            return name
        return "vanilla" if self.floor(workload).loses else "adaptive"

    def run(
        self,
        policy: AnyPolicy | None,
        workload: Workload,
        *,
        seed: int,
        table: bool = False,
        steps: int | None = None,
        warmup_steps: int | None = None,
        trace: bool = False,
        **engine: Any,
    ) -> SimResult:
        """One run on one seed; ``None`` is vanilla serving, ``table`` sets a K table.

        ``steps`` 0 runs a finite workload to its end (a drain). The adaptive
        policy is the add-on, whose vLLM plugin makes a K=0 step skip a
        stateless drafter (``step_time`` module docstring); the other policies
        are vLLM as it ships.
        """
        s = self.settings
        n = s.steps if steps is None else steps
        return self.preset.simulate(
            policy,
            workload,
            speculative=policy is not None,
            piecewise=table and policy is not None,
            plain_k0=isinstance(policy, AdaptivePolicy),
            steps=n or None,
            seed=seed,
            warmup_steps=s.warmup_steps if warmup_steps is None else warmup_steps,
            trace=trace,
            **engine,
        )

    def run_named(self, name: str, workload: Workload, *, seed: int, **kw: Any) -> SimResult:
        """``run`` with the policy built from its name (and its table flag)."""
        name = self.resolve(name, workload)
        return self.run(self.build(name), workload, seed=seed, table=name in TABLE_POLICIES, **kw)

    def drain(self, name: str, workload: Workload, *, seed: int) -> SimResult:
        """``workload`` served until every request finished, traced: ``oracle`` is the
        per-step true-cost oracle at the live state (it sets K per step, as a table
        does), any other name a policy (``run_named``). The rollout and phased
        scenarios' runs."""
        if name != "oracle":
            return self.run_named(name, workload, seed=seed, steps=0, warmup_steps=0, trace=True)
        preset = self.preset
        oracle = StateOracle(
            preset.cost, preset.acceptance, preset.proposal_model, self.allowed_k()
        )
        return self.run(
            oracle, workload, seed=seed, table=True, steps=0, warmup_steps=0, trace=True
        )

    def allowed_k(self) -> list[int]:
        """The K values the profile measured: the oracle's candidates."""
        return sorted({m.k for m in self.profile.spec.measurements})


def compare_steady(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    *,
    progress: Callable[[str], None] | None = None,
) -> list[PolicyResult]:
    """Closed loop at each batch size (concurrency = batch size), every policy, every seed.

    ``oracle`` is the best fixed K per batch size and seed in hindsight, run
    with a table set.
    """
    rows: list[PolicyResult] = []
    for bs in batch_sizes:
        if bs > cmp.preset.max_batch_size:
            raise ValueError(
                f"--batch-sizes: {bs} exceeds the preset's max batch size "
                f"{cmp.preset.max_batch_size}"
            )
        workload = ClosedLoop(bs, cmp.preset.workload.prompt, cmp.preset.workload.output)
        per_policy: dict[str, list[SeedFigures]] = {p: [] for p in policies}
        oracle_ks: list[int] = []
        for seed in cmp.settings.seeds:
            if progress:
                progress(f"batch size {bs}, seed {seed}")
            for name in policies:
                if name == "oracle":
                    best_k, r = best_fixed_k(cmp, workload, seed=seed, table=True)
                    oracle_ks.append(best_k)
                    per_policy[name].append(SeedFigures(seed, figures(r, oracle_k=best_k)))
                else:
                    r = cmp.run_named(name, workload, seed=seed)
                    per_policy[name].append(SeedFigures(seed, figures(r)))
        for name in policies:
            extra: dict[str, Any] = {}
            if name == "oracle":
                extra["oracle_k"] = max(set(oracle_ks), key=oracle_ks.count)
            if name == "specdeploy":
                verdict = cmp.floor(workload)
                extra["floor"] = {
                    "predicted_gain": verdict.gain,
                    "serves": cmp.resolve(name, workload),
                }
            rows.append(PolicyResult(name, bs, tuple(per_policy[name]), extra))
    return rows


def best_fixed_k(
    cmp: Comparison, workload: Workload, *, seed: int, table: bool, **kw: Any
) -> tuple[int, SimResult]:
    """The fixed K with the most tokens/s on this seed, and its run."""
    runs = {
        k: cmp.run(FixedPolicy(k), workload, seed=seed, table=table, **kw) for k in cmp.allowed_k()
    }
    best = max(runs, key=lambda k: (runs[k].tokens_per_s, -k))
    return best, runs[best]
