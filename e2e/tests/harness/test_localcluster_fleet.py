"""Fleet specs become GFD-labelled Node objects that KWOK will manage."""

from __future__ import annotations

import pytest

from e2e.localcluster.fleet import (
    KWOK_ANNOTATION,
    FleetSpecError,
    fleet_manifests,
    parse_fleet,
    schedulable,
)


def test_a_spec_names_node_counts_per_type_with_default_gpus_per_node() -> None:
    pools = parse_fleet("h100=4, a100=2,l40s=2x8")

    assert [(p.key, p.nodes, p.gpus) for p in pools] == [
        ("h100", 4, 8),
        ("a100", 2, 8),
        ("l40s", 2, 8),
    ]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param("", id="empty"),
        pytest.param("v100=1", id="unknown type"),
        pytest.param("h100", id="no count"),
        pytest.param("h100=two", id="count not a number"),
        pytest.param("h100=0", id="zero nodes"),
        pytest.param("h100=1x0", id="zero gpus"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_entry(spec: str) -> None:
    with pytest.raises(FleetSpecError):
        parse_fleet(spec)


def test_nodes_carry_gfd_labels_gpu_capacity_and_the_kwok_annotation() -> None:
    (node,) = fleet_manifests(parse_fleet("a100=1x4"))
    labels = node["metadata"]["labels"]

    assert node["metadata"]["name"] == "gpu-a100-0"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["metadata"]["annotations"] == dict([KWOK_ANNOTATION])


def test_node_names_are_unique_across_pools() -> None:
    names = [n["metadata"]["name"] for n in fleet_manifests(parse_fleet("h100=2,l4=3"))]

    assert len(set(names)) == 5


def test_a_node_is_schedulable_once_ready_and_rid_of_lifecycle_taints() -> None:
    node = fleet_manifests(parse_fleet("h100=1"))[0]
    assert not schedulable(node)  # no Ready condition yet
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    node["spec"] = {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}
    assert not schedulable(node)
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert schedulable(node)  # a user's taint is the pods' business (their tolerations)
