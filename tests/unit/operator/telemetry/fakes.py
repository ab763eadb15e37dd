"""Shared builders for the telemetry tests: a deployment and its profile, windows, a fake API.

Windows are built from per-position acceptance the way the add-on counts
(reached = sequences at a position with the earlier ones accepted), so a
test states the traffic ("a_1 = 0.4") and the counters follow.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from specdeploy.operator.api import SpeculativeDeploymentSpec
from specdeploy.operator.builders.common import APPLIED_HASH
from specdeploy.operator.config import Config
from specdeploy.operator.decision.decide import Decision, decide
from specdeploy.operator.observed import Observed
from specdeploy.operator.pool.context import Memory
from specdeploy.operator.pool.fingerprint import pool_fingerprint, profile_name
from specdeploy.operator.telemetry.window import PoolWindow, StepTimes, TelemetryReport
from specdeploy.runtime.profile import parse_profile
from specdeploy.runtime.schedule import cost_model
from tests.paths import ROOT

NS, UID, NOW, LATER = "inference", "uid-a", "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
H100 = "NVIDIA-H100-80GB-HBM3"
URL = "http://prometheus.test:9090"
NAME = "llama-8b-chat"
PROFILE_RATES = (0.81, 0.69, 0.58, 0.49, 0.41)


def body(**spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "specdeploy.yaml").read_text())
    doc["spec"]["pools"] = [{"gpuType": H100, "gpusPerReplica": 1, "replicas": {"min": 1}}]
    doc["spec"]["telemetry"] = {"prometheusURL": URL, "interval": "60s"}
    doc["spec"].update(spec)
    doc["metadata"].update({"name": NAME, "namespace": NS, "uid": UID, "generation": 1})
    return doc


def profile_doc(deployment: Mapping[str, Any], *, generation: int = 1) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "profile-example.yaml").read_text())
    spec = SpeculativeDeploymentSpec.model_validate(deployment["spec"])
    fp = pool_fingerprint(spec, gpu_type=H100, gpus_per_replica=1)
    doc["spec"]["fingerprint"] = fp.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["metadata"] = {"name": profile_name(fp), "namespace": NS, "generation": generation}
    return doc


def profile_spec(deployment: Mapping[str, Any]) -> Any:
    return parse_profile(profile_doc(deployment)).spec


def counts_for(rates: Sequence[float], k: int, sequences: float) -> tuple[list[float], list[float]]:
    """(reached, accepted) per position when ``sequences`` sequence-steps ran at K=k."""
    reached, accepted, alive = [], [], sequences
    for i in range(5):
        if i >= k:
            reached.append(0.0)
            accepted.append(0.0)
            continue
        reached.append(alive)
        alive *= rates[i]
        accepted.append(alive)
    return reached, accepted


def window(
    rates: Sequence[float] = PROFILE_RATES,
    *,
    k: int = 5,
    sequences: float = 20000.0,
    bucket: str = "3-4",
    bs: float = 3.5,
    cost_factor: float = 1.0,
    steps: float = 5000.0,
    age: float = 5.0,
    deployment: Mapping[str, Any] | None = None,
) -> PoolWindow:
    """A pool's window: traffic at ``rates``, steps at ``bucket``, ``cost_factor`` x the profile."""
    reached, accepted = counts_for(rates, k, sequences)
    model = cost_model(profile_spec(deployment or body()))
    _, v = model.base(bs, k)
    itl_s = model.itl_ms(bs, k, bs * v, bs * model.reference_context) * cost_factor / 1000.0
    return PoolWindow(
        window_seconds=60.0,
        reached=tuple(reached),
        proposed=tuple(reached),
        accepted=tuple(accepted),
        verified_tokens=sequences * (1 + k),
        sequence_steps=sequences,
        step_times={(bucket, k): StepTimes(itl_s * steps, steps)},
        steps_by_k={k: steps},
        requests_per_second=2.0,
        age_seconds=age,
    )


def report(p: PoolWindow) -> TelemetryReport:
    """An interval in which the H100 pool had window ``p``."""
    return TelemetryReport(URL, 60.0, {H100: p})


def stored(manifest: Mapping[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(dict(manifest))
    obj["metadata"].update(resourceVersion="1", uid=f"obj-{obj['metadata']['name']}", generation=1)
    if obj["kind"] == "Deployment":
        n = obj["spec"].get("replicas", 1)  # left out: an HPA owns it; the default
        obj["status"] = {
            "observedGeneration": 1,
            "replicas": n,
            "updatedReplicas": n,
            "readyReplicas": n,
            "availableReplicas": n,
        }
    return obj


def world(
    deployment: Mapping[str, Any],
    decision: Decision | None = None,
    *,
    profile: Mapping[str, Any] | None = None,
) -> Observed:
    """The cluster after ``decision`` was applied (its children stored, rollouts done)."""
    children: dict[str, dict[str, Any]] = {}
    for m in (decision.owned + decision.shared) if decision else ():
        children.setdefault(m["kind"], {})[m["metadata"]["name"]] = stored(m)
    prof = dict(profile or profile_doc(deployment))
    return Observed(
        nodes=[
            {
                "metadata": {"name": "h1", "labels": {"nvidia.com/gpu.product": H100}},
                "status": {"capacity": {"nvidia.com/gpu": "8"}},
            }
        ],
        profiles={prof["metadata"]["name"]: prof},
        children=children,
    )


def settle(
    deployment: dict[str, Any],
    *,
    config: Config | None = None,
    profile: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Decision]:
    """Reconcile until nothing changes (at most 4 rounds); the body carries the status written."""
    cfg = config or Config()
    decision = decide(deployment, world(deployment, profile=profile), now=NOW, config=cfg)
    for _ in range(4):
        deployment = {**deployment, "status": decision.status}
        obs = world(deployment, decision, profile=profile)
        decision = decide(deployment, obs, now=NOW, config=cfg)
    return {**deployment, "status": decision.status}, decision


def step(
    deployment: dict[str, Any],
    before: Decision,
    telemetry: TelemetryReport | None,
    *,
    now: str = LATER,
    profile: Mapping[str, Any] | None = None,
    config: Config | None = None,
) -> tuple[dict[str, Any], Decision]:
    """One reconcile with an interval's report: the body with the new status, and the decision."""
    obs = world(deployment, before, profile=profile)
    memory = Memory(telemetry=telemetry)
    decision = decide(deployment, obs, now=now, config=config or Config(), memory=memory)
    return {**deployment, "status": decision.status}, decision


def owned(decision: Decision, kind: str) -> dict[str, Any]:
    return next(m for m in decision.owned if m["kind"] == kind)


def pool(decision: Decision) -> dict[str, Any]:
    pools: list[dict[str, Any]] = decision.status["pools"]
    return pools[0]


def condition(decision: Decision, kind: str) -> dict[str, Any]:
    return next(c for c in decision.status["conditions"] if c["type"] == kind)


def without_hash(manifest: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(manifest))
    out["metadata"].get("annotations", {}).pop(APPLIED_HASH, None)
    return out
