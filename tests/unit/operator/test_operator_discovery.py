"""GPU discovery from node labels and capacity, honouring the node selector."""

from __future__ import annotations

from typing import Any

from specdeploy.operator.discovery import gpu_inventory, node_signature, selector_keys


def node(gpu: str | None, gpus: Any = "8", **labels: str) -> dict[str, Any]:
    all_labels = dict(labels)
    if gpu is not None:
        all_labels["nvidia.com/gpu.product"] = gpu
    status = {} if gpus is None else {"capacity": {"nvidia.com/gpu": gpus}}
    return {"metadata": {"name": "n", "labels": all_labels}, "status": status}


def test_gpu_types_are_counted_per_product_label() -> None:
    found = gpu_inventory([node("H100"), node("H100", "4"), node("A100")])
    assert list(found) == ["A100", "H100"]
    assert (found["H100"].nodes, found["H100"].max_gpus_per_node, found["H100"].total_gpus) == (
        2,
        8,
        12,
    )


def test_nodes_without_a_product_label_or_gpus_are_ignored() -> None:
    assert (
        gpu_inventory([node(None), node("H100", "0"), node("H100", None), node("H100", "lots")])
        == {}
    )


def test_allocatable_wins_over_capacity() -> None:
    n = node("H100", "8")
    n["status"]["allocatable"] = {"nvidia.com/gpu": "6"}
    assert gpu_inventory([n])["H100"].max_gpus_per_node == 6


def test_the_node_selector_restricts_discovery() -> None:
    nodes = [node("H100", team="a"), node("A100", team="b")]
    assert list(gpu_inventory(nodes, {"team": "b"})) == ["A100"]


def test_a_node_signature_ignores_what_discovery_does_not_read() -> None:
    a, b = node("H100"), node("H100")
    b["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert node_signature(a) == node_signature(b)
    b["status"]["capacity"]["nvidia.com/gpu"] = "4"
    assert node_signature(a) != node_signature(b)


def test_a_node_signature_keeps_only_the_labels_a_node_selector_names() -> None:
    a, b = node("H100", team="a"), node("H100", team="a")
    b["metadata"]["labels"]["kubernetes.io/os"] = "linux"  # the node controller's patch
    assert node_signature(a, {"team"}) == node_signature(b, {"team"})
    assert node_signature(a) != node_signature(b)
    b["metadata"]["labels"]["team"] = "b"
    assert node_signature(a, {"team"}) != node_signature(b, {"team"})


def test_selector_keys_are_the_union_of_the_deployments_node_selectors() -> None:
    specs = [{"nodeSelector": {"team": "a"}}, {"nodeSelector": {"zone": "x", "team": "b"}}, {}]
    assert selector_keys(specs) == {"team", "zone"}
    assert selector_keys([{"nodeSelector": None}]) == frozenset()
