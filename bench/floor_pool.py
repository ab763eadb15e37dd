"""One pool under the live floor, window by window, decided by the operator's own code: MODELLED.

The live floor (``operator/pool/live_floor.py``) acts on telemetry windows,
minutes apart, and on restarts that take minutes; the simulator runs one
replica step by step. This module joins them without a rule of its own:

* **the pods**: the simulator runs one speculating replica (the add-on's
  adaptive policy, seeded from the pool's profile, on the K the pod's table
  starts with plus 0) and one plain replica over the whole horizon, with the
  same traffic (closed loop at one batch size, the same seed). Every replica
  of a pool is such a replica (the Service spreads requests evenly);
* **the telemetry**: each window of the speculating trace becomes the
  ``PoolWindow`` Prometheus would hand the operator (the add-on's counters:
  reached/proposed/accepted per position, verified tokens, sequence steps,
  the clean decode steps' times per batch bucket and K, and an EAGLE head's
  K=0 pass as the pods time it: on a GPU with CUDA events, a path no GPU
  has run yet, ``vllm_addon/k0_pass.py``), scaled by the number
  of speculating pods in the window. Step times carry live noise (log-normal
  AR(1), CV and lag-1 fitted on the shipped CPU profile's raw runs,
  ``bench/search_noise.py``), so the operator's cost correction sees what a
  real one would;
* **the decision**: ``decision.decide`` on a SpeculativeDeployment of that
  pool, with the pool's profile, once per window with that window (the
  reconcile the telemetry loop triggers). What it decides is read from its
  manifests: the pool's Deployment with or without ``--speculative-config``,
  the canary Deployment or none;
* **the rollout**: with ``maxSurge: 1, maxUnavailable: 0`` a changed template
  replaces one replica per ``restart_seconds``: the old pods serve until each
  new one is Ready, so the pool's mix moves one replica at a time. The canary
  serves once Ready (``restart_seconds`` after it is created).

What is modelled and not the product's: the operator sees every rollout
done at once (status), the pods' tables are the profile's (the operator's
live table pushes are not replayed into the simulated add-on), and a pod
that speculates again continues the canary's adapted state instead of
adapting afresh (a few hundred steps, under a second of a window).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.search_noise import ar1_factors
from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.config import Config
from specdeploy.operator.decision.decide import Decision, decide
from specdeploy.operator.observed import Observed
from specdeploy.operator.pool.context import Memory
from specdeploy.operator.pool.fingerprint import pool_fingerprint, profile_name
from specdeploy.operator.telemetry.window import Cell, PoolWindow, StepTimes, TelemetryReport
from specdeploy.runtime.contract import bucket_label
from specdeploy.runtime.goodput import FloatArray
from specdeploy.runtime.profile import SpeculationProfile
from specdeploy.runtime.sim.acceptance import AcceptanceModel, Drifting
from specdeploy.runtime.sim.compare import Comparison
from specdeploy.runtime.sim.engine import StepTrace
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.workload import ClosedLoop

GPU = "NVIDIA-H200"
NAMESPACE, NAME, UID = "bench", "floor-pool", "uid-floor-pool"
PROMETHEUS = "http://prometheus.bench:9090"
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LIVE_STEP_CV = 0.16
LIVE_STEP_RHO = 0.72
"""Live step-time noise: the shipped CPU profile's raw runs (``search_noise.fit_raw``:
timing CV 0.163, lag-1 0.716), the honest-evidence issue's figures."""


@dataclass(frozen=True)
class Alternating(Drifting):
    """Acceptance that switches between ``before`` and ``after`` every ``period`` seconds
    from ``at`` on (``after`` first): traffic that oscillates between two regimes."""

    period: float = 600.0

    def weight(self, step: int, t: float) -> float:
        x = t - self.at
        if x < 0:
            return 0.0
        return 1.0 if int(x // self.period) % 2 == 0 else 0.0


# --- the traces ----------------------------------------------------------------


@dataclass(frozen=True)
class Traces:
    """The two kinds of replica over the horizon: speculating with the add-on, and plain."""

    speculating: StepTrace
    plain: StepTrace
    noise: FloatArray
    """Live step-time factors of the speculating trace (what its telemetry reports)."""
    plain_noise: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Live step-time factors of the plain trace as a plain reference pod's clock (drawn
    apart: another pod); empty: the plain trace's own times."""
    finished: tuple[FloatArray, FloatArray] = field(
        default_factory=lambda: (np.zeros(0), np.zeros(0))
    )
    """When each request finished: (speculating, plain)."""

    @cached_property
    def clean(self) -> npt.NDArray[np.bool_]:
        """The speculating trace's steps the add-on times: pure decode, K unchanged."""
        trace = self.speculating
        previous_k = np.concatenate(([-1], trace.k[:-1]))
        clean: npt.NDArray[np.bool_] = (
            (trace.prefill_tokens == 0) & (trace.decode_seqs > 0) & (trace.k == previous_k)
        )
        return clean

    @cached_property
    def live_seconds(self) -> FloatArray:
        """The speculating trace's step times as its telemetry reports them (with noise)."""
        live: FloatArray = self.speculating.seconds * self.noise
        return live

    def tpot(self, speculating: bool, lo: float, hi: float) -> StepTimes | None:
        """vLLM's time per output token over (lo, hi] for one pod, as its histogram's sum and
        count: the requests finished in the window, each at the window's live seconds per
        output token (every decoding sequence waits each step). A stand-in for the mean of
        the finished requests' own TPOTs, which span their lifetimes (MODELLED)."""
        trace = self.speculating if speculating else self.plain
        factors = self.noise if speculating else self.plain_noise
        sel = (trace.end_time > lo) & (trace.end_time <= hi)
        tokens = float(trace.tokens[sel].sum())
        finished = self.finished[0 if speculating else 1]
        requests = float(((finished > lo) & (finished <= hi)).sum())
        if tokens <= 0 or requests <= 0:
            return None
        seconds = trace.seconds[sel] * (factors[sel] if factors.size else 1.0)
        per_token = float((seconds * trace.decode_seqs[sel]).sum()) / tokens
        return StepTimes(per_token * requests, requests)

    def tokens(self, speculating: bool, lo: float, hi: float) -> float:
        trace = self.speculating if speculating else self.plain
        sel = (trace.end_time > lo) & (trace.end_time <= hi)
        return float(trace.tokens[sel].sum())


def run_traces(
    preset: Preset,
    profile: SpeculationProfile,
    acceptance: AcceptanceModel,
    *,
    batch_size: int,
    horizon_s: float,
    seed: int,
) -> Traces:
    """One speculating and one plain replica over ``horizon_s`` engine seconds."""
    cmp = Comparison(preset, profile)
    workload = ClosedLoop(batch_size, preset.workload.prompt, preset.workload.output)
    spec = preset.simulate(
        cmp.build("adaptive"),
        workload,
        acceptance=acceptance,
        piecewise=True,
        plain_k0=True,  # the add-on's plugin (step_time's module docstring)
        duration_s=horizon_s,
        seed=seed,
        trace=True,
    )
    plain = preset.simulate(
        None, workload, speculative=False, duration_s=horizon_s, seed=seed, trace=True
    )
    assert spec.trace is not None and plain.trace is not None
    assert spec.requests is not None and plain.requests is not None
    rng = np.random.default_rng([seed, 7])
    noise = ar1_factors(rng, spec.trace.seconds.size, LIVE_STEP_CV, LIVE_STEP_RHO)
    plain_rng = np.random.default_rng([seed, 11])
    plain_noise = ar1_factors(plain_rng, plain.trace.seconds.size, LIVE_STEP_CV, LIVE_STEP_RHO)
    finished = (spec.requests.finish, plain.requests.finish)
    return Traces(spec.trace, plain.trace, noise, plain_noise, finished)


def _scaled(times: StepTimes | None, pods: float) -> StepTimes | None:
    if times is None or pods <= 0:
        return None
    return StepTimes(times.seconds * pods, times.count * pods)


def telemetry_window(
    traces: Traces,
    lo: float,
    hi: float,
    *,
    pods: float,
    window_s: float,
    reference: float = 0.0,
) -> PoolWindow | None:
    """What Prometheus reports for ``pods`` speculating replicas over (lo, hi]: the add-on's
    counters summed over them, and vLLM's time per output token of theirs and of a plain
    reference pod serving ``reference`` of the window (None: no speculating pod, so no
    series)."""
    trace = traces.speculating
    sel = (trace.end_time > lo) & (trace.end_time <= hi)
    if pods <= 0 or not sel.any():
        return None
    counts = trace.counts[sel].sum(axis=0).astype(np.float64) * pods
    clean = sel & traces.clean
    step_times: dict[Cell, StepTimes] = {}
    step_sizes: dict[Cell, float] = {}
    steps_by_k: dict[int, float] = {}
    k0_passes: dict[str, StepTimes] = {}
    live = traces.live_seconds
    # the drafter's K=0 pass, as the pods time it (k0_pass); a step's clock runs slow for
    # its pass too
    timed_pass = trace.k0_pass
    passes = None if timed_pass is None else timed_pass * traces.noise

    def add(into: dict[Any, StepTimes], key: Any, seconds: float, steps: float) -> None:
        before = into.get(key, StepTimes(0.0, 0.0))
        into[key] = StepTimes(before.seconds + seconds * pods, before.count + steps * pods)

    for bs, k in set(zip(trace.batch_size[clean].tolist(), trace.k[clean].tolist(), strict=True)):
        at = clean & (trace.batch_size == bs) & (trace.k == k)
        cell = (bucket_label(int(bs)), int(k))
        add(step_times, cell, float(live[at].sum()), float(at.sum()))
        step_sizes[cell] = step_sizes.get(cell, 0.0) + float(bs) * float(at.sum()) * pods
        if k == 0 and passes is not None and timed_pass is not None:
            timed = at & (timed_pass > 0)
            if timed.any():
                add(
                    k0_passes, bucket_label(int(bs)), float(passes[timed].sum()), float(timed.sum())
                )
    for k in np.unique(trace.k[sel]).tolist():
        steps_by_k[int(k)] = float((trace.k[sel] == k).sum()) * pods
    return PoolWindow(
        window_seconds=window_s,
        reached=tuple(counts[0].tolist()),
        proposed=tuple(counts[1].tolist()),
        accepted=tuple(counts[2].tolist()),
        verified_tokens=float(trace.verified[sel].sum()) * pods,
        sequence_steps=float(trace.decode_seqs[sel].sum()) * pods,
        step_times=step_times,
        step_batch_sizes=step_sizes,
        steps_by_k=steps_by_k,
        k0_passes=k0_passes,
        generation_tokens_per_second=float(trace.tokens[sel].sum()) * pods / window_s,
        tpot=_scaled(traces.tpot(True, lo, hi), pods),
        reference_tpot=_scaled(traces.tpot(False, lo, hi), reference),
        age_seconds=5.0,
    )


# --- the operator --------------------------------------------------------------


def deployment(preset: Preset, replicas: int, window_s: float) -> dict[str, Any]:
    """A SpeculativeDeployment of one fixed-size pool of the preset's model, fallback vanilla."""
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID, "generation": 1},
        "spec": {
            "model": {"name": f"sim/{preset.name}", "servedModelName": "bench"},
            "speculation": {
                "method": "eagle3",
                "draftModel": f"sim/{preset.name}-draft",
                "maxK": preset.max_k,
                "policy": "adaptive",
                "fallback": "vanilla",
            },
            "pools": [
                {
                    "gpuType": GPU,
                    "gpusPerReplica": 1,
                    "replicas": {"min": replicas, "max": replicas},
                }
            ],
            "telemetry": {"prometheusURL": PROMETHEUS, "interval": f"{window_s:g}s"},
        },
    }


def profile_document(body: Mapping[str, Any], profile: SpeculationProfile) -> dict[str, Any]:
    """The pool's SpeculationProfile: ``profile``'s measurements under the pool's fingerprint."""
    doc = profile.to_document()
    spec = SpeculativeDeploymentSpec.model_validate(body["spec"])
    fp = pool_fingerprint(spec, gpu_type=GPU, gpus_per_replica=1)
    doc["spec"]["fingerprint"] = fp.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["metadata"] = {"name": profile_name(fp), "namespace": NAMESPACE, "generation": 1}
    return doc


def _stored(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A child as the API server holds it, rolled out (the operator sees rollouts done)."""
    obj = copy.deepcopy(dict(manifest))
    obj["metadata"].update(resourceVersion="1", uid=f"obj-{obj['metadata']['name']}", generation=1)
    if obj["kind"] == "Deployment":
        n = obj["spec"].get("replicas", 1)
        obj["status"] = dict.fromkeys(
            ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"), n
        ) | {"observedGeneration": 1}
    return obj


@dataclass
class Operator:
    """The operator's decision for the pool, reconciled once per telemetry window."""

    body: dict[str, Any]
    profile: dict[str, Any]
    config: Config
    window_s: float
    decision: Decision = field(default_factory=Decision)

    def _observed(self) -> Observed:
        children: dict[str, dict[str, Any]] = {}
        for m in self.decision.owned + self.decision.shared:
            children.setdefault(m["kind"], {})[m["metadata"]["name"]] = _stored(m)
        return Observed(
            nodes=[
                {
                    "metadata": {"name": "gpu-node", "labels": {"nvidia.com/gpu.product": GPU}},
                    "status": {"capacity": {"nvidia.com/gpu": "64"}},
                }
            ],
            profiles={self.profile["metadata"]["name"]: self.profile},
            children=children,
        )

    def reconcile(self, seconds: float, window: PoolWindow | None = None) -> Decision:
        """One reconcile at ``seconds`` into the run, with this interval's window (if any)."""
        now = (START + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        telemetry = None
        if window is not None:
            telemetry = TelemetryReport(PROMETHEUS, self.window_s, {GPU: window})
        self.decision = decide(
            self.body,
            self._observed(),
            now=now,
            config=self.config,
            memory=Memory(telemetry=telemetry),
        )
        self.body = {**self.body, "status": self.decision.status}
        return self.decision

    def settle(self) -> None:
        """The first reconciles, before any traffic: children created, nothing judged."""
        for _ in range(4):
            self.reconcile(0.0)

    def speculating(self) -> bool:
        """Whether the pool's own Deployment runs with speculation configured."""
        return "--speculative-config" in json.dumps(self._deployment(""))

    def canary(self) -> bool:
        return self._deployment("-canary") is not None

    def reference(self) -> bool:
        """Whether the live floor asks for a plain reference replica beside the pool."""
        return self._deployment("-reference") is not None

    def _deployment(self, suffix: str) -> dict[str, Any] | None:
        """The pod template of the Deployment named with ``suffix`` ("": the pool's own)."""
        companions = ("-canary", "-reference")
        for m in self.decision.owned:
            name = m["metadata"]["name"]
            mine = name.endswith(suffix) if suffix else not name.endswith(companions)
            if m["kind"] == "Deployment" and mine:
                return dict(m["spec"]["template"])
        return None

    def floor(self) -> dict[str, Any]:
        pools: list[dict[str, Any]] = self.decision.status.get("pools") or [{}]
        return dict(pools[0].get("floor") or {})


# --- the pool's replicas ---------------------------------------------------------


@dataclass
class Replicas:
    """The pool's replicas through surged rollouts: ``speculating`` of ``total`` now, moving one
    replica per ``restart_seconds`` toward the Deployment's template."""

    total: int
    restart_seconds: float
    speculating: int = 0
    target: bool = True
    next_move: float = math.inf
    canary_since: float | None = None
    """When the canary pod was created (it serves from ``restart_seconds`` later)."""
    reference_since: float | None = None
    """When the plain reference pod was created (it serves from ``restart_seconds`` later)."""

    def __post_init__(self) -> None:
        self.speculating = self.total

    def aim(self, speculating: bool, canary: bool, now: float, reference: bool = False) -> None:
        """The decision at ``now``: the template's mode, and whether a canary or a plain
        reference is wanted (each a surged extra pod)."""
        if speculating != self.target:
            self.target = speculating
            self.next_move = now + self.restart_seconds
        if canary and self.canary_since is None:
            self.canary_since = now
        elif not canary:
            self.canary_since = None
        if reference and self.reference_since is None:
            self.reference_since = now
        elif not reference:
            self.reference_since = None

    def _serving_from(self, since: float | None) -> float:
        return math.inf if since is None else since + self.restart_seconds

    def segments(self, lo: float, hi: float) -> list[tuple[float, float, int, bool, bool]]:
        """(start, end, speculating pool replicas, canary serving, plain reference serving)
        over (lo, hi], moving the rollout along."""
        out: list[tuple[float, float, int, bool, bool]] = []
        t = lo
        while t < hi:
            end = min(hi, self.next_move)
            canary_at = self._serving_from(self.canary_since)
            reference_at = self._serving_from(self.reference_since)
            for at in (canary_at, reference_at):
                if t < at < end:
                    end = at
            out.append((t, end, self.speculating, t >= canary_at, t >= reference_at))
            t = end
            if t >= self.next_move:
                wanted = self.total if self.target else 0
                self.speculating += 1 if wanted > self.speculating else -1
                done = self.speculating == wanted
                self.next_move = math.inf if done else self.next_move + self.restart_seconds
        return out


# --- one run ---------------------------------------------------------------------


@dataclass(frozen=True)
class WindowRecord:
    """One telemetry window of the pool, as served and as the operator judged it."""

    end_s: float
    pool_tokens: float
    """Tokens the pool's own replicas served in the window (the canary's apart)."""
    plain_tokens: float
    """Tokens as many plain replicas as the pool has served in the window (the same
    traffic): the pool's plain-decoding reference."""
    pool_over_plain: float
    """The pool's replicas' tokens over as many plain replicas' in the window."""
    with_canary_over_plain: float
    """The same counting the canary's or the plain reference's GPU: (pool + its tokens) /
    plain per GPU."""
    speculating_replicas: float
    canary: bool
    reference: bool
    state: str
    ratio: float | None
    ratio_high: float | None
    ratio_low: float | None

    def record(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def run_pool(
    traces: Traces,
    operator: Operator,
    *,
    replicas: int,
    restart_seconds: float,
    horizon_s: float,
) -> list[WindowRecord]:
    """Every window of the horizon: serve it, report its telemetry, reconcile on it."""
    window_s = operator.window_s
    pods = Replicas(replicas, restart_seconds)
    operator.settle()
    out: list[WindowRecord] = []
    for w in range(int(horizon_s // window_s)):
        lo, hi = w * window_s, (w + 1) * window_s
        pool_tokens = extra_tokens = spec_pod_seconds = extra_seconds = reference_seconds = 0.0
        for a, b, speculating, canary, reference in pods.segments(lo, hi):
            spec_tokens, plain_tokens = traces.tokens(True, a, b), traces.tokens(False, a, b)
            pool_tokens += speculating * spec_tokens + (replicas - speculating) * plain_tokens
            spec_pod_seconds += (speculating + canary) * (b - a)
            if canary:
                extra_tokens += spec_tokens
                extra_seconds += b - a
            if reference:
                extra_tokens += plain_tokens
                extra_seconds += b - a
                reference_seconds += b - a
        plain = traces.tokens(False, lo, hi)
        pods_seen = spec_pod_seconds / window_s
        window = telemetry_window(
            traces,
            lo,
            hi,
            pods=pods_seen,
            window_s=window_s,
            reference=reference_seconds / window_s,
        )
        operator.reconcile(hi, window)
        wants_canary, wants_reference = operator.canary(), operator.reference()
        pods.aim(operator.speculating(), wants_canary, hi, wants_reference)
        floor = operator.floor()
        gpus = replicas + extra_seconds / window_s
        out.append(
            WindowRecord(
                end_s=hi,
                pool_tokens=pool_tokens,
                plain_tokens=replicas * plain,
                pool_over_plain=pool_tokens / (replicas * plain) if plain else math.nan,
                with_canary_over_plain=(pool_tokens + extra_tokens) / (gpus * plain)
                if plain
                else math.nan,
                speculating_replicas=spec_pod_seconds / window_s,
                canary=wants_canary,
                reference=wants_reference,
                state=str(floor.get("state", "Speculating")),
                ratio=floor.get("ratio"),
                ratio_high=floor.get("ratioHigh"),
                ratio_low=floor.get("ratioLow"),
            )
        )
    return out


def flips(records: Sequence[WindowRecord]) -> list[float]:
    """When the operator changed the pool's state (window end times)."""
    return [b.end_s for a, b in itertools.pairwise(records) if a.state != b.state]


__all__ = [
    "Alternating",
    "Operator",
    "Replicas",
    "Traces",
    "WindowRecord",
    "deployment",
    "flips",
    "profile_document",
    "run_pool",
    "run_traces",
    "telemetry_window",
]
