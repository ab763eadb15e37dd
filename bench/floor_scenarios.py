"""The live floor's scenarios with targets (issue 31, deliverable 5): every figure is MODELLED.

Each scenario runs one pool of ``--replicas`` replicas of a simulator preset
under the operator's own decision (``bench/floor_pool.py``: the operator's
``decide`` once per telemetry window on the window the pods' counters give,
surged rollouts of ``restart_seconds`` per replica). The pool's profile is
one the profiler's own search measured under the fitted measurement noise
(``bench/search_noise.py``: step CV and lag-1 from the shipped CPU profile's
raw runs, paired and unshared offsets, over-dispersed acceptance), a fresh
draw per run; the pods' live step times carry the same CV and lag-1. Nothing
the policy or the operator sees is noise-free.

* ``collapse``: chat, then random text (acceptance 0.02 at every position)
  from minute 20 on. Target: the last 30 min at >= 0.99x plain decoding;
  reported, the time from the collapse until the pool serves at plain
  decoding's rate for good.
* ``oscillate``: chat and random text alternating every 10 min for 2 h.
  Targets: at most 2 flips in any hour; the pool's tokens over the run
  >= 0.97x those of the best static choice in hindsight (plain decoding or
  the best fixed K, which at one batch size is at least the static table).
* ``served-256``: a pool profiled over 1..256 and served at batch 256, chat
  throughout, for 3 h. Target: the last hour at >= 0.99x plain decoding;
  reported, when it got there.

Every target is judged on the 5th percentile over the draws (``--draws``, 20
by default; the worst for the flips), and each has a unit test in which a
deliberately worse floor fails it (``tests/unit/bench/test_floor_scenarios.py``).
The pool's ratio counts its own replicas; the canary's GPU (one more while
plain) or the plain reference's (one more while it measures) is reported beside
it. Writes ``live_floor.json`` and ``live_floor.md`` under ``--out``; exits 1 if
a target is missed.

    python bench/floor_scenarios.py [--out bench/results] [--draws 20] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script (make bench): bench.* from the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.floor_pool import (
    Alternating,
    Operator,
    WindowRecord,
    deployment,
    flips,
    profile_document,
    run_pool,
    run_traces,
)
from bench.profiler_search import RAW_FILE, noise_model
from bench.search_noise import NoiseModel, NoisyBackend, fit_raw
from specdeploy.operator.config import Config, FloorSettings
from specdeploy.runtime.policy.static import FixedPolicy
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.profiler.run import ProfileOptions, profile
from specdeploy.runtime.profiler.sim_backend import SimBackend
from specdeploy.runtime.sim.acceptance import AcceptanceModel, Drifting, Profile
from specdeploy.runtime.sim.presets import Preset, get_preset
from specdeploy.runtime.sim.profiling import profile_preset
from specdeploy.runtime.sim.workload import ClosedLoop

ROOT = Path(__file__).resolve().parents[1]
COLLAPSED_RATE = 0.02
PLAIN_TARGET = 0.99
STATIC_TARGET = 0.97
MAX_FLIPS_PER_HOUR = 2
PERCENTILE = 5.0
HOUR_S = 3600.0
FIRST_SEED = 1000
"""Profile-noise seeds start here (the held-out range ``bench/profiler_search.py`` uses)."""


@dataclass(frozen=True)
class Scenario:
    """One traffic pattern on one pool."""

    name: str
    preset: str
    batch_size: int
    horizon_s: float
    judged_from_s: float
    """The steady part a ratio target is judged on starts here."""
    change_at_s: float
    """When the traffic turns hostile (the recovery time counts from here)."""
    alternating: bool = False

    def acceptance(self, preset: Preset) -> AcceptanceModel:
        good = Profile(tuple(preset.acceptance.nominal()))
        bad = Profile(tuple(COLLAPSED_RATE for _ in good.per_position))
        if self.alternating:
            return Alternating(good, bad, at=self.change_at_s, period=self.change_at_s)
        if math.isinf(self.change_at_s):
            return good
        return Drifting(good, bad, at=self.change_at_s)

    def shortened(self, factor: float) -> Scenario:
        """The same scenario ``factor`` times as long (the unit tests' quick runs)."""
        return replace(
            self,
            horizon_s=self.horizon_s * factor,
            judged_from_s=self.judged_from_s * factor,
            change_at_s=self.change_at_s * factor,
        )


SCENARIOS: dict[str, Scenario] = {
    "collapse": Scenario("collapse", "seed-dense", 16, 7200.0, 5400.0, 1200.0),
    "oscillate": Scenario("oscillate", "seed-dense", 16, 7200.0, 0.0, 600.0, alternating=True),
    "served-256": Scenario("served-256", "seed-dense", 256, 10800.0, 7200.0, math.inf),
}


@dataclass(frozen=True)
class Setup:
    """The pool and the operator's settings every scenario runs with."""

    replicas: int = 4
    window_s: float = 60.0
    floor: FloorSettings = field(default_factory=FloorSettings)
    """The operator's defaults; ``restart_seconds`` is also what a replica's restart takes."""
    profile: str = "measured"
    """``measured``: the profiler's search through the fitted noise, a draw per seed (the
    targets' evidence); ``exact``: the preset's noise-free exhaustive profile (a reference:
    what the rule does when the profile is right)."""

    def config(self) -> Config:
        return Config(floor=self.floor)


# --- the profile -------------------------------------------------------------------


@cache
def _noise() -> NoiseModel:
    """The fitted model in full (``profiler_search.noise_model``) at the fitted CV and lag-1."""
    fitted = fit_raw(json.loads(RAW_FILE.read_text()))
    return noise_model(fitted, fitted.timing_cv, "full", fitted.timing_rho)


def measured_profile(preset_name: str, seed: int) -> SpeculationProfile:
    """The pool's profile as ``specdeploy profile --backend sim`` measures it (smart search,
    context axis, plain-decoding baseline) through the fitted noise: one prior draw."""
    preset = get_preset(preset_name)
    backend = NoisyBackend(SimBackend(preset, seed=seed, jitter=0.0), _noise(), seed=seed)
    return profile(ProfileOptions(preset=preset_name, seed=seed), backend).profile


@cache
def exact_profile(preset_name: str) -> SpeculationProfile:
    """The preset's exhaustive, noise-free profile (``sim.profiling.profile_preset``)."""
    return profile_preset(get_preset(preset_name))


# --- one draw ------------------------------------------------------------------------


@dataclass(frozen=True)
class Draw:
    """One scenario under one profile draw: the windows and what they add up to."""

    scenario: str
    seed: int
    windows: tuple[WindowRecord, ...]
    judged_over_plain: float
    """The pool's tokens over plain decoding's in the judged (steady) part."""
    run_over_plain: float
    with_canary_over_plain: float
    """Over the judged part, counting the canary's GPU."""
    flips: tuple[float, ...]
    max_flips_per_hour: int
    recovered_after_s: float | None
    """From the traffic change until the pool serves at >= 0.99x plain decoding for good."""

    def record(self, *, windows: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "seed": self.seed,
            "judgedOverPlain": round(self.judged_over_plain, 4),
            "runOverPlain": round(self.run_over_plain, 4),
            "withCanaryOverPlain": round(self.with_canary_over_plain, 4),
            "flips": [round(t) for t in self.flips],
            "maxFlipsPerHour": self.max_flips_per_hour,
            "recoveredAfterS": None
            if self.recovered_after_s is None
            else round(self.recovered_after_s),
        }
        if windows:
            out["windows"] = [w.record() for w in self.windows]
        return out


def _ratio(windows: Sequence[WindowRecord]) -> float:
    plain = sum(w.plain_tokens for w in windows)
    return sum(w.pool_tokens for w in windows) / plain if plain else math.nan


def most_flips_in_an_hour(times: Sequence[float]) -> int:
    """The most flips in any hour-long span."""
    return max((sum(1 for t in times if s <= t < s + HOUR_S) for s in times), default=0)


def recovery(windows: Sequence[WindowRecord], change_at_s: float) -> float | None:
    """Seconds from ``change_at_s`` to the end of the first window after which every window
    serves at >= 0.99x plain decoding (None: never, or no change)."""
    if math.isinf(change_at_s):
        change_at_s = 0.0
    good_from = None
    for w in windows:
        if w.end_s <= change_at_s:
            continue
        if w.pool_over_plain >= PLAIN_TARGET:
            good_from = w.end_s if good_from is None else good_from
        else:
            good_from = None
    return None if good_from is None else good_from - change_at_s


def run_draw(scenario: Scenario, seed: int, setup: Setup) -> Draw:
    """``scenario`` on a pool whose profile is draw ``seed``; traffic seed ``seed`` too."""
    preset = get_preset(scenario.preset)
    if setup.profile == "exact":
        prof = exact_profile(scenario.preset)
    else:
        prof = measured_profile(scenario.preset, seed)
    traces = run_traces(
        preset,
        prof,
        scenario.acceptance(preset),
        batch_size=scenario.batch_size,
        horizon_s=scenario.horizon_s,
        seed=seed,
    )
    body = deployment(preset, setup.replicas, setup.window_s)
    operator = Operator(body, profile_document(body, prof), setup.config(), setup.window_s)
    windows = run_pool(
        traces,
        operator,
        replicas=setup.replicas,
        restart_seconds=setup.floor.restart_seconds,
        horizon_s=scenario.horizon_s,
    )
    judged = [w for w in windows if w.end_s > scenario.judged_from_s]
    gpus = sum(setup.replicas + float(w.canary) + float(w.reference) for w in judged)
    served = sum(
        w.with_canary_over_plain * (setup.replicas + w.canary + w.reference) for w in judged
    )
    times = flips(windows)
    return Draw(
        scenario=scenario.name,
        seed=seed,
        windows=tuple(windows),
        judged_over_plain=_ratio(judged),
        run_over_plain=_ratio(windows),
        with_canary_over_plain=served / gpus if gpus else math.nan,
        flips=tuple(times),
        max_flips_per_hour=most_flips_in_an_hour(times),
        recovered_after_s=recovery(windows, scenario.change_at_s),
    )


def best_static_over_plain(scenario: Scenario, seed: int) -> tuple[float, str]:
    """The best static choice in hindsight over the run: plain decoding or a fixed K (no
    table set), its tokens over plain decoding's, and which it was."""
    preset = get_preset(scenario.preset)
    workload = ClosedLoop(scenario.batch_size, preset.workload.prompt, preset.workload.output)
    acceptance = scenario.acceptance(preset)
    plain = preset.simulate(
        None, workload, speculative=False, duration_s=scenario.horizon_s, seed=seed
    ).total_tokens
    best, name = 1.0, "plain"
    for k in range(1, preset.max_k + 1):
        tokens = preset.simulate(
            FixedPolicy(k),
            workload,
            acceptance=acceptance,
            duration_s=scenario.horizon_s,
            seed=seed,
        ).total_tokens
        if tokens / plain > best:
            best, name = tokens / plain, f"fixed:{k}"
    return best, name


# --- the targets -------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    target: str
    passed: bool
    detail: str

    def record(self) -> dict[str, Any]:
        return {"target": self.target, "status": "PASS" if self.passed else "FAIL", **vars(self)}


def percentile(values: Sequence[float], q: float = PERCENTILE) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _spread(values: Sequence[float]) -> str:
    a = np.asarray(values, dtype=float)
    return (
        f"p5 {percentile(values):.3f}, median {float(np.median(a)):.3f}, "
        f"min {float(a.min()):.3f}, max {float(a.max()):.3f} (n={a.size})"
    )


def _recoveries(draws: Sequence[Draw]) -> str:
    times = [d.recovered_after_s for d in draws]
    got = sorted(t for t in times if t is not None)
    if not got:
        return "never recovered"
    never = len(times) - len(got)
    return f"recovered after median {np.median(got) / 60:.0f} min, max {got[-1] / 60:.0f} min" + (
        f"; {never} of {len(times)} never" if never else ""
    )


def check_collapse(draws: Sequence[Draw]) -> list[Check]:
    values = [d.judged_over_plain for d in draws]
    canary = [d.with_canary_over_plain for d in draws]
    return [
        Check(
            "collapse: the last 30 min >= 0.99x plain decoding (p5 over draws)",
            percentile(values) >= PLAIN_TARGET,
            f"{_spread(values)}; {_recoveries(draws)}; with the canary's GPU: {_spread(canary)}",
        )
    ]


def check_oscillate(draws: Sequence[Draw], static: dict[int, tuple[float, str]]) -> list[Check]:
    worst = max(d.max_flips_per_hour for d in draws)
    vs_static = [d.run_over_plain / static[d.seed][0] for d in draws]
    picks = sorted({static[d.seed][1] for d in draws})
    return [
        Check(
            "oscillate: <= 2 flips in any hour (worst draw)",
            worst <= MAX_FLIPS_PER_HOUR,
            f"worst {worst}; flips per draw {sorted(len(d.flips) for d in draws)}",
        ),
        Check(
            "oscillate: the run >= 0.97x max(plain decoding, best fixed K) (p5 over draws)",
            percentile(vs_static) >= STATIC_TARGET,
            f"{_spread(vs_static)}; best static per seed: {', '.join(picks)}; the run over "
            f"plain decoding: {_spread([d.run_over_plain for d in draws])}",
        ),
    ]


def check_served_256(draws: Sequence[Draw]) -> list[Check]:
    values = [d.judged_over_plain for d in draws]
    return [
        Check(
            "served-256: the last hour >= 0.99x plain decoding (p5 over draws)",
            percentile(values) >= PLAIN_TARGET,
            f"{_spread(values)}; {_recoveries(draws)}; the first hour: "
            f"{_spread([_ratio([w for w in d.windows if w.end_s <= HOUR_S]) for d in draws])}",
        )
    ]


# --- running it ------------------------------------------------------------------------


def _one(job: tuple[str, int, Setup]) -> Draw:
    name, seed, setup = job
    return run_draw(SCENARIOS[name], seed, setup)


def _static(job: tuple[str, int]) -> tuple[int, tuple[float, str]]:
    name, seed = job
    return seed, best_static_over_plain(SCENARIOS[name], seed)


def run_all(
    names: Sequence[str],
    seeds: Sequence[int],
    setup: Setup,
    *,
    jobs: int,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[dict[str, list[Draw]], dict[int, tuple[float, str]]]:
    work = [(name, seed, setup) for name in names for seed in seeds]
    draws: dict[str, list[Draw]] = {name: [] for name in names}
    static: dict[int, tuple[float, str]] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        if "oscillate" in names:
            for seed, best in pool.map(_static, [("oscillate", s) for s in seeds]):
                static[seed] = best
            progress(f"best static choices: {len(static)} seeds")
        for draw in pool.map(_one, work):
            draws[draw.scenario].append(draw)
            progress(
                f"{draw.scenario} seed {draw.seed}: judged {draw.judged_over_plain:.3f}x plain, "
                f"{len(draw.flips)} flips"
            )
    return draws, static


def checks(draws: dict[str, list[Draw]], static: dict[int, tuple[float, str]]) -> list[Check]:
    out: list[Check] = []
    if draws.get("collapse"):
        out += check_collapse(draws["collapse"])
    if draws.get("oscillate"):
        out += check_oscillate(draws["oscillate"], static)
    if draws.get("served-256"):
        out += check_served_256(draws["served-256"])
    return out


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# The live floor's scenarios (MODELLED)",
        "",
        "`python bench/floor_scenarios.py` (issue 31, deliverable 5). A pool of "
        f"{doc['setup']['replicas']} replicas of a simulator preset, decided by the operator's "
        f"own `decide` once per {doc['setup']['windowSeconds']:g} s telemetry window on the "
        "window its pods' counters give; surged rollouts of "
        f"{doc['setup']['restartSeconds']:g} s per replica; profiles measured by the "
        "profiler's search under the fitted noise (a fresh draw per run), live step times "
        f"noisy. {doc['draws']['measured']} draws per scenario; ratio targets on the 5th "
        "percentile. "
        f"Machine-independent (simulated time); wall time {doc['wallSeconds']:.0f} s.",
        "",
        "| target | status | figures |",
        "|---|---|---|",
    ]
    lines += [f"| {c['target']} | {c['status']} | {c['detail']} |" for c in doc["checks"]]
    lines += [
        "",
        "The same scenarios with the preset's exact (noise-free) profile, a reference that is "
        "not a target: what the rule does when the profile is right.",
        "",
        "| reference | status | figures |",
        "|---|---|---|",
    ]
    lines += [
        f"| {c['target']} | {c['status']} | {c['detail']} |" for c in doc["exactProfileReference"]
    ]
    lines += ["", "Scenarios:", ""]
    for name, s in doc["scenarios"].items():
        lines.append(
            f"- `{name}`: {s['preset']} at batch {s['batchSize']}, {s['horizonS'] / 60:.0f} min, "
            f"judged from minute {s['judgedFromS'] / 60:.0f}"
        )
    return "\n".join(lines) + "\n"


def _document(
    names: Sequence[str],
    setup: Setup,
    runs: dict[str, tuple[dict[str, list[Draw]], dict[int, tuple[float, str]]]],
    found: list[Check],
    reference: list[Check],
    wall_s: float,
) -> dict[str, Any]:
    measured, _ = runs["measured"]
    return {
        "source": "modelled",
        "draws": {kind: len(next(iter(d.values()), [])) for kind, (d, _) in runs.items()},
        "setup": {
            "replicas": setup.replicas,
            "windowSeconds": setup.window_s,
            "restartSeconds": setup.floor.restart_seconds,
            "floor": vars(setup.floor),
        },
        "wallSeconds": round(wall_s, 1),
        "scenarios": {
            n: {
                "preset": SCENARIOS[n].preset,
                "batchSize": SCENARIOS[n].batch_size,
                "horizonS": SCENARIOS[n].horizon_s,
                "judgedFromS": SCENARIOS[n].judged_from_s,
            }
            for n in names
        },
        "checks": [c.record() for c in found],
        "exactProfileReference": [c.record() for c in reference],
        "bestStatic": {
            str(s): {"overPlain": round(v, 4), "choice": c}
            for s, (v, c) in runs["measured"][1].items()
        },
        "results": {
            kind: {n: [d.record() for d in ds] for n, ds in draws.items()}
            for kind, (draws, _) in runs.items()
        },
        "windowsOfFirstDraw": {
            n: ds[0].record(windows=True)["windows"] for n, ds in measured.items() if ds
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--draws", type=int, default=20, help="measured-profile draws per scenario")
    ap.add_argument("--exact-draws", type=int, default=3, help="traffic seeds, exact profile")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or args.draws < 1 or args.exact_draws < 1:
        ap.error(f"unknown scenario(s) {unknown}; use {', '.join(SCENARIOS)}; draws >= 1")
    started = time.monotonic()
    runs: dict[str, tuple[dict[str, list[Draw]], dict[int, tuple[float, str]]]] = {}
    for kind, n in (("measured", args.draws), ("exact", args.exact_draws)):

        def say(message: str, kind: str = kind) -> None:
            print(kind, message, flush=True)

        seeds = list(range(FIRST_SEED, FIRST_SEED + n))
        runs[kind] = run_all(names, seeds, Setup(profile=kind), jobs=args.jobs, progress=say)
    found = checks(*runs["measured"])
    reference = [replace(c, target=f"(exact profile) {c.target}") for c in checks(*runs["exact"])]
    doc = _document(names, Setup(), runs, found, reference, time.monotonic() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "live_floor.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "live_floor.md").write_text(markdown(doc))
    for c in found + reference:
        print(f"{'PASS' if c.passed else 'FAIL'}  {c.target}: {c.detail}")
    return 0 if all(c.passed for c in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
