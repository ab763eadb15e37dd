"""What the fleet benchmark creates: a seeded GPU fleet and a seeded mix of deployments.

Deterministic (``random.Random(seed)``), so two runs (before/after an operator
change) create the same objects. The mix is what a platform team's cluster
holds: one popular model shared by many deployments in one namespace (one
profile for all of them), teams with explicit pools, teams relying on GPU
discovery narrowed by a node selector, and fixed-K deployments that need no
profile. Pure: no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from e2e.localcluster.fleet import CATALOG

Obj = dict[str, Any]
NODE_SHARES = {"h100": 0.30, "h200": 0.10, "a100": 0.25, "l40s": 0.15, "l4": 0.12, "a10g": 0.08}
"""Share of the fleet's nodes per GPU type (all six of ``fleet.CATALOG``)."""
TEAM_TYPES = (("h100", "h200"), ("a100", "h100"), ("l40s", "h200"))
"""The GPU types a team's profiled pools use: the simulator models these four (it has no
model of L4 and A10G, whose profiling Jobs fail deterministically; found by this bench)."""
TEAM_SELECTORS = (
    {"nvidia.com/gpu.family": "hopper"},
    {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    {"nvidia.com/gpu.product": "NVIDIA-L40S"},
)
"""A discovery deployment's node selector per team, and the types it finds (below)."""
SELECTED_TYPES = (("h100", "h200"), ("a100",), ("l40s",))
FIXED_TYPES = ("l4", "a10g")
"""Fixed-K deployments (no profile) run on the small GPUs."""
MODELS: tuple[tuple[str, str, str | None], ...] = (
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "eagle", "yuhuili/EAGLE-mixtral-instruct-8x7B"),
    ("meta-llama/Llama-3.1-8B-Instruct", "ngram", None),
    ("meta-llama/Llama-3.1-70B-Instruct", "draft_model", "meta-llama/Llama-3.2-1B-Instruct"),
)
SHARED_NAMESPACE = "fleet-00"


def fleet_spec(nodes: int) -> str:
    """``fleet.parse_fleet``'s spec for ``nodes`` nodes split by ``NODE_SHARES`` (each >= 1)."""
    counts = {k: max(1, int(nodes * share)) for k, share in NODE_SHARES.items()}
    counts["h100"] += max(0, nodes - sum(counts.values()))
    return ",".join(f"{k}={n}" for k, n in counts.items())


@dataclass(frozen=True)
class Planned:
    """One deployment to create, and the (namespace, fingerprint) keys it needs profiled."""

    namespace: str
    body: Obj
    kind: str
    profiles: frozenset[tuple[str, ...]]


def _body(name: str, model: tuple[str, str, str | None], pools: list[str] | None) -> Obj:
    model_name, method, draft = model
    speculation: Obj = {"method": method, "maxK": 4, "policy": "adaptive"}
    if draft:
        speculation["draftModel"] = draft
    spec: Obj = {
        "model": {"name": model_name, "revision": "main"},
        "speculation": speculation,
        "poolDefaults": {"gpusPerReplica": 1, "replicas": {"min": 1, "max": 2}},
        "profiling": {"mode": "auto", "batchSizes": [1, 4, 16, 64], "activeDeadlineSeconds": 1800},
        "telemetry": {"interval": "30s"},
    }
    if pools is not None:
        spec["pools"] = [
            {"gpuType": CATALOG[p].product, "gpusPerReplica": 1, "replicas": {"min": 1, "max": 2}}
            for p in pools
        ]
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }


def namespaces(count: int) -> list[str]:
    return [f"fleet-{i:02d}" for i in range(count)]


def plan(total: int, namespace_count: int, seed: int = 18) -> list[Planned]:
    """``total`` deployments; a prefix of a longer plan is the shorter one (steps add)."""
    rng = random.Random(seed)
    names = namespaces(namespace_count)
    teams = names[1:] or names
    out: list[Planned] = []
    for i in range(total):
        roll = rng.random()
        if roll < 0.2:
            ns, model, pools, kind = SHARED_NAMESPACE, MODELS[0], ["h100"], "shared"
        else:
            ns = teams[i % len(teams)]
            team = names.index(ns)
            model = MODELS[team % len(MODELS)]
            types = TEAM_TYPES[team % len(TEAM_TYPES)]
            if roll < 0.5:
                kind, pools = "explicit", [types[rng.randrange(2)]]
            elif roll < 0.8:
                kind, pools = "discovery", None
            else:
                kind, pools = "fixed", [FIXED_TYPES[rng.randrange(2)]]
        body = _body(f"sd-{i:04d}", model, pools)
        if pools is None:
            team = names.index(ns) % len(TEAM_SELECTORS)
            body["spec"]["nodeSelector"] = dict(TEAM_SELECTORS[team])
            used = list(SELECTED_TYPES[team])
        else:
            used = pools
        if kind == "fixed":
            body["spec"]["speculation"].update(policy="fixed", fixedK=3)
            profiles: frozenset[tuple[str, ...]] = frozenset()
        else:
            profiles = frozenset((ns, model[0], model[1], CATALOG[p].product) for p in used)
        out.append(Planned(ns, body, kind, profiles))
    return out


def expected_jobs(planned: list[Planned]) -> int:
    """Profiling Jobs the operator should create: one per (namespace, fingerprint)."""
    return len(set().union(*(p.profiles for p in planned))) if planned else 0
