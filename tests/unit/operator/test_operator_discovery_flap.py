"""A device-plugin restart does not delete what serves (review H2, inverted probe).

At 7a48b4a a discovered pool's Deployment and table were deleted when its
only node's allocatable GPUs read 0 for a moment, although the node and its
GPUs (capacity) were still there.
"""

from __future__ import annotations

from specdeploy.operator.decision.decide import decide
from specdeploy.operator.decision.plan import plan_children
from tests.unit.operator.test_operator_reconcile import (
    H100,
    NOW,
    converged,
    deployment,
    node,
    observed,
    profile,
)


def test_allocatable_flapping_to_zero_deletes_nothing() -> None:
    body = deployment()
    body["spec"].pop("pools", None)
    world, _ = converged(body, observed(profiles=(profile(body, H100),), nodes=(node("h1", H100),)))
    unplugged = node("h1", H100)
    unplugged["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    flapping = observed(
        *[o for objs in world.children.values() for o in objs.values()],
        nodes=(unplugged,),
        profiles=tuple(dict(p) for p in world.profiles.values()),
    )
    sent = plan_children(body, decide(body, flapping, now=NOW), flapping)
    assert not [r for r in sent if r.method == "DELETE"], sent


def test_a_node_without_any_gpus_left_is_no_pool() -> None:
    gone = node("h1", H100)
    gone["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    gone["status"]["capacity"] = {"nvidia.com/gpu": "0"}
    from specdeploy.operator.discovery import gpu_inventory

    assert gpu_inventory([gone]) == {}
    assert H100 in gpu_inventory([node("h1", H100)])
