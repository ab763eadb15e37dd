"""Names and label values for children, valid however long the parent's name is.

A SpeculativeDeployment's name may be a 253-character DNS subdomain with dots;
its children need DNS-1035 labels (Services: at most 63 characters, lowercase
letters, digits and '-', starting with a letter) and label values (63
characters). When the natural name does not fit, it is cut and ends in a hash
of the whole natural name, so two long parents never share a child name.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
_HASH_CHARS = 8
_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")

PROFILER_ACCOUNT = "specdeploy-profiler"
"""ServiceAccount, Role and RoleBinding shared by the profiling Jobs of a namespace."""
OPERATOR_LEASE = "specdeploy-operator"
"""The Lease the operator's replicas elect their leader with (``--leader-election-id``)."""


def short_hash(text: str, chars: int = _HASH_CHARS) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def _fit(natural: str, cleaned: str, limit: int, strip: str) -> str:
    """``cleaned`` if it fits and lost nothing, else a cut prefix plus a hash of ``natural``."""
    if cleaned == natural and len(cleaned) <= limit:
        return cleaned
    keep = cleaned[: limit - _HASH_CHARS - 1].rstrip(strip)
    return f"{keep}-{short_hash(natural)}" if keep else short_hash(natural)


def dns_label(*parts: str) -> str:
    """``parts`` joined by '-' as a DNS-1035 label (<= 63, starts with a letter)."""
    natural = "-".join(parts)
    cleaned = _INVALID.sub("-", natural.lower()).strip("-")
    if not cleaned[:1].isalpha():
        cleaned = f"sd-{cleaned}".rstrip("-")
    return _fit(natural, cleaned, MAX_NAME, "-")


def label_value(text: str) -> str:
    """``text`` as a label value: <= 63 characters, alphanumeric at both ends."""
    cleaned = _LABEL_INVALID.sub("-", text).strip("-._")
    return _fit(text, cleaned, MAX_NAME, "-._")


def gpu_slug(gpu_type: str) -> str:
    """``NVIDIA-H100-80GB-HBM3`` -> ``h100-80gb-hbm3``: short, for child names."""
    slug = _INVALID.sub("-", gpu_type.lower()).strip("-")
    return slug.removeprefix("nvidia-") or slug


def deployment_name(parent: str, gpu_type: str) -> str:
    return dns_label(parent, gpu_slug(gpu_type))


def canary_deployment_name(parent: str, gpu_type: str) -> str:
    """The live floor's canary beside a pool running plain decoding."""
    return dns_label(parent, gpu_slug(gpu_type), "canary")


def reference_deployment_name(parent: str, gpu_type: str) -> str:
    """The live floor's plain reference replica beside a speculating pool."""
    return dns_label(parent, gpu_slug(gpu_type), "reference")


def table_configmap_name(parent: str, gpu_type: str) -> str:
    return dns_label(parent, gpu_slug(gpu_type), "table")


def service_name(parent: str) -> str:
    return dns_label(parent)


def job_name(profile_name: str, salt: str | None = None) -> str:
    """The profiling Job of a profile: one per fingerprint, shared by every deployment.

    ``salt`` (``profiling.mode: always``) makes a Job per deployment generation.
    """
    base = f"profile-{profile_name}"
    return dns_label(base, short_hash(salt, 6)) if salt else dns_label(base)
