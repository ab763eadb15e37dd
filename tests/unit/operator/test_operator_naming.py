"""Child names stay valid Kubernetes names however long the parent's name is."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdeploy.operator.naming import (
    deployment_name,
    dns_label,
    gpu_slug,
    job_name,
    label_value,
    service_name,
    table_configmap_name,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
# DNS-1123 subdomains: what a SpeculativeDeployment may be called.
SUBDOMAIN = st.from_regex(r"\A[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


@given(parent=SUBDOMAIN, gpu=st.sampled_from(["NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "x" * 63]))
def test_every_child_name_is_a_dns_label_for_any_parent(parent: str, gpu: str) -> None:
    for name in (
        deployment_name(parent, gpu),
        table_configmap_name(parent, gpu),
        service_name(parent),
    ):
        assert DNS_1035.match(name), name


@given(parent=SUBDOMAIN)
def test_a_label_value_is_valid_for_any_parent(parent: str) -> None:
    assert LABEL_VALUE.match(label_value(parent))


def test_a_short_name_is_kept_as_it_is() -> None:
    assert deployment_name("llama", "NVIDIA-H100-80GB-HBM3") == "llama-h100-80gb-hbm3"
    assert service_name("llama") == "llama"


def test_two_long_parents_sharing_a_prefix_get_different_children() -> None:
    a, b = "a" * 70 + "-one", "a" * 70 + "-two"
    assert deployment_name(a, "NVIDIA-L40S") != deployment_name(b, "NVIDIA-L40S")
    assert len(deployment_name(a, "NVIDIA-L40S")) == 63


@pytest.mark.parametrize(
    ("parent", "expected"),
    [
        ("7b.chat", "sd-7b-chat"),
        ("llama.v2", "llama-v2-"),
    ],
)
def test_names_that_need_rewriting_are_rewritten_and_hashed(parent: str, expected: str) -> None:
    assert dns_label(parent).startswith(expected)


def test_gpu_slug_drops_the_vendor_prefix() -> None:
    assert gpu_slug("NVIDIA-A100-SXM4-80GB") == "a100-sxm4-80gb"


def test_job_names_differ_per_salt_and_are_stable_without_one() -> None:
    assert job_name("p-0123456789abcdef") == "profile-p-0123456789abcdef"
    assert job_name("p-1", "uid/1") != job_name("p-1", "uid/2")
