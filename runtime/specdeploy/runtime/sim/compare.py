"""K policies side by side on one simulated replica: the numbers behind ``specdeploy simulate``.

Every figure here is *modelled* (simulator), never measured.

Policies by name:

* ``vanilla``   no speculation configured at all (no drafter cost);
* ``fixed:N``   K = N on every step (vLLM's static ``num_speculative_tokens``);
* ``table``     the static schedule derived from the preset's (modelled)
                profile, looked up by the raw batch size like vLLM does;
* ``adaptive``  specdeploy's policy, seeded with the same profile;
* ``oracle``    the best fixed K in hindsight, per batch size (per phase in
                the drift scenario).

Runs at one batch size share a seed, so every policy meets the same request
lengths and the same acceptance draws (common random numbers): differences
between policies are differences in K, not luck.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdeploy.runtime.policy import AdaptivePolicy, TablePolicy
from specdeploy.runtime.policy.base import KPolicy
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.sim.engine import SimResult
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.workload import ClosedLoop, Workload

BASE_POLICIES = ("vanilla", "table", "adaptive", "oracle")


@dataclass(frozen=True)
class PolicyResult:
    """One row of the comparison: a policy at one batch size (or one scenario)."""

    policy: str
    batch_size: float
    tokens_per_s: float
    mean_k: float
    k_changes_per_1000_steps: float
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON record scripts rely on (extra keys come after the contract's)."""
        return {
            "policy": self.policy,
            "batch_size": round(self.batch_size, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "mean_k": round(self.mean_k, 4),
            "k_changes_per_1000_steps": round(self.k_changes_per_1000_steps, 3),
            **self.extra,
        }


@dataclass(frozen=True)
class RunSettings:
    """How long each run is, and its seed."""

    steps: int = 3000
    warmup_steps: int = 300
    seed: int = 0


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
            f"--policies: unknown policy {name!r}; use vanilla, fixed:N, table, adaptive, oracle"
        )
    if len(set(names)) != len(names):
        raise ValueError("--policies: a policy is listed twice")
    return names


@dataclass(frozen=True)
class Comparison:
    """One preset, its modelled profile, and how to run any policy on it."""

    preset: Preset
    profile: SpeculationProfile
    settings: RunSettings = RunSettings()

    def build(self, name: str) -> KPolicy | None:
        """A fresh policy (policies learn, so never share one between runs)."""
        if name == "vanilla":
            return None
        if name.startswith("fixed:"):
            return FixedPolicy(int(name.removeprefix("fixed:")))
        if name == "table":
            return TablePolicy.from_profile(self.profile, max_batch_size=self.preset.max_batch_size)
        if name == "adaptive":
            return AdaptivePolicy.from_profile(
                self.profile, max_batch_size=self.preset.max_batch_size
            )
        raise ValueError(f"no single policy is called {name!r}")

    def run(
        self,
        policy: KPolicy | None,
        workload: Workload,
        *,
        steps: int | None = None,
        trace: bool = False,
        **engine: Any,
    ) -> SimResult:
        """One run with this comparison's settings; ``None`` is vanilla serving."""
        s = self.settings
        return self.preset.simulate(
            policy,
            workload,
            speculative=policy is not None,
            steps=s.steps if steps is None else steps,
            seed=s.seed,
            warmup_steps=s.warmup_steps,
            trace=trace,
            **engine,
        )

    def allowed_k(self) -> list[int]:
        """The K values the profile measured: the oracle's candidates."""
        return sorted({m.k for m in self.profile.spec.measurements})


def _result(name: str, bs: float, r: SimResult, **extra: Any) -> PolicyResult:
    return PolicyResult(name, bs, r.tokens_per_s, r.mean_k, r.k_changes_per_1000_steps, extra)


def compare_steady(
    cmp: Comparison,
    batch_sizes: Sequence[int],
    policies: Sequence[str],
    *,
    progress: Callable[[str], None] | None = None,
) -> list[PolicyResult]:
    """Closed loop at each batch size (concurrency = batch size), every policy."""
    rows: list[PolicyResult] = []
    for bs in batch_sizes:
        if bs > cmp.preset.max_batch_size:
            raise ValueError(
                f"--batch-sizes: {bs} exceeds the preset's max batch size "
                f"{cmp.preset.max_batch_size}"
            )
        workload = ClosedLoop(bs, cmp.preset.workload.prompt, cmp.preset.workload.output)
        fixed: dict[int, SimResult] = {}

        def fixed_run(
            k: int, wl: Workload = workload, cache: dict[int, SimResult] = fixed
        ) -> SimResult:
            if k not in cache:
                cache[k] = cmp.run(FixedPolicy(k), wl)
            return cache[k]

        for name in policies:
            if progress:
                progress(f"batch size {bs}: {name}")
            if name == "oracle":
                best_k = max(cmp.allowed_k(), key=lambda k: fixed_run(k).tokens_per_s)
                rows.append(_result(name, bs, fixed_run(best_k), oracle_k=best_k))
            elif name.startswith("fixed:"):
                rows.append(_result(name, bs, fixed_run(int(name.removeprefix("fixed:")))))
            else:
                rows.append(_result(name, bs, cmp.run(cmp.build(name), workload)))
    return rows
