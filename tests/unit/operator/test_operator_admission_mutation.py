"""A mutating webhook's additions are not a change to undo (review M3, inverted probe).

At 7a48b4a a Deployment whose pods an admission webhook gave a sidecar (or
another field manager gave an env var) looked hand-edited on every reconcile:
the pool stayed RollingOut and was re-applied forever.
"""

from __future__ import annotations

import copy

from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan_children
from specdeploy.operator.manifests import is_subset, needs_apply
from tests.unit.operator.test_operator_reconcile import (
    H100,
    NOW,
    converged,
    deployment,
    node,
    observed,
    profile,
    serving,
)


def test_a_sidecar_added_by_admission_is_left_alone_and_the_pool_gets_ready() -> None:
    body = deployment({"pools": [{"gpuType": H100}]})
    world, decision = converged(
        body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),))
    )
    dep = serving(decision, H100)
    existing = world.children["Deployment"][dep["metadata"]["name"]]
    mutated = copy.deepcopy(dict(existing))
    pod = mutated["spec"]["template"]["spec"]
    pod["containers"].append({"name": "istio-proxy", "image": "proxy"})
    pod["containers"][0].setdefault("env", []).append({"name": "INJECTED", "value": "1"})
    assert not needs_apply(dep, mutated)
    world2 = observed(
        *[
            o
            for kind, objs in world.children.items()
            for o in objs.values()
            if kind != "Deployment"
        ],
        mutated,
        nodes=(node("h1", H100),),
        profiles=tuple(dict(p) for p in world.profiles.values()),
    )
    d2 = decide(body, world2, now=NOW)
    (pool,) = d2.status["pools"]
    assert pool["state"] != "RollingOut"
    assert plan_children(body, d2, world2) == []


def test_a_hand_edit_of_our_own_fields_is_still_undone() -> None:
    wanted = {"containers": [{"name": "vllm", "image": "a"}]}
    assert is_subset(wanted, {"containers": [{"name": "vllm", "image": "a"}, {"name": "x"}]})
    assert not is_subset(wanted, {"containers": [{"name": "vllm", "image": "b"}]})
    assert not is_subset(wanted, {"containers": [{"name": "other", "image": "a"}]})
    assert not is_subset({"args": ["a", "b"]}, {"args": ["a", "b", "c"]}), "plain lists: exact"
