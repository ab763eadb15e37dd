"""Where each kind lives in the API: one kind table, and REST paths built from it. Pure.

A REST path needs three facts per kind: its apiVersion (core kinds live
under ``/api/v1``, the others under ``/apis/<group>/<version>``), its plural
and whether it is namespaced. The operator's reads and writes, the
profiler's write and the local-cluster harness all build paths here, so a
kind is added once and a typo in a plural cannot hide in one caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.runtime.profile import (
    API_VERSION,
    DEPLOYMENT_KIND,
    DEPLOYMENT_PLURAL,
    PROFILE_KIND,
    PROFILE_PLURAL,
)

__all__ = ["KINDS", "Kind", "collection_path", "kind_of", "object_path", "path"]


@dataclass(frozen=True)
class Kind:
    """What a REST path needs to know about one kind."""

    api_version: str
    plural: str
    namespaced: bool = True

    @property
    def root(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


KINDS: Mapping[str, Kind] = {
    "ConfigMap": Kind("v1", "configmaps"),
    "Event": Kind("v1", "events"),
    "Namespace": Kind("v1", "namespaces", namespaced=False),
    "Node": Kind("v1", "nodes", namespaced=False),
    "Pod": Kind("v1", "pods"),
    "Secret": Kind("v1", "secrets"),
    "Service": Kind("v1", "services"),
    "ServiceAccount": Kind("v1", "serviceaccounts"),
    "Deployment": Kind("apps/v1", "deployments"),
    "ReplicaSet": Kind("apps/v1", "replicasets"),
    "Job": Kind("batch/v1", "jobs"),
    "HorizontalPodAutoscaler": Kind("autoscaling/v2", "horizontalpodautoscalers"),
    "ScaledObject": Kind("keda.sh/v1alpha1", "scaledobjects"),
    "Lease": Kind("coordination.k8s.io/v1", "leases"),
    "PodDisruptionBudget": Kind("policy/v1", "poddisruptionbudgets"),
    "NetworkPolicy": Kind("networking.k8s.io/v1", "networkpolicies"),
    "Role": Kind("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": Kind("rbac.authorization.k8s.io/v1", "rolebindings"),
    "ClusterRole": Kind("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Kind(
        "rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False
    ),
    "SelfSubjectAccessReview": Kind(
        "authorization.k8s.io/v1", "selfsubjectaccessreviews", namespaced=False
    ),
    "CustomResourceDefinition": Kind(
        "apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False
    ),
    DEPLOYMENT_KIND: Kind(API_VERSION, DEPLOYMENT_PLURAL),
    PROFILE_KIND: Kind(API_VERSION, PROFILE_PLURAL),
}


def kind_of(name: str) -> Kind:
    """The table's entry for ``name``; an unknown kind names the table to add it to."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"{name} is not in specdeploy.runtime.kube.paths.KINDS") from None


def path(
    kind: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """``/apis/apps/v1/namespaces/ns/deployments/name[/sub]``; ``/api/v1/...`` for core kinds.

    No namespace: the collection across all namespaces. A cluster-scoped kind
    ignores the namespace, so a manifest's namespace may be passed whatever
    its kind.
    """
    found = kind_of(kind)
    parts = [found.root]
    if namespace is not None and found.namespaced:
        parts.append(f"namespaces/{namespace}")
    parts.append(found.plural)
    if name is not None:
        parts.append(name)
    if sub is not None:
        parts.append(sub)
    return "/".join(parts)


def _checked(manifest: Mapping[str, Any]) -> str:
    """The manifest's kind; a manifest whose apiVersion is not the table's is refused."""
    kind = str(manifest["kind"])
    declared = manifest.get("apiVersion")
    if declared is not None and declared != kind_of(kind).api_version:
        raise ValueError(f"{kind} is served as {kind_of(kind).api_version}, not {declared}")
    return kind


def object_path(manifest: Mapping[str, Any]) -> str:
    """The REST path of an object given as a manifest (``apiVersion`` may be absent)."""
    meta = manifest["metadata"]
    return path(_checked(manifest), meta.get("namespace"), meta["name"])


def collection_path(manifest: Mapping[str, Any]) -> str:
    """The REST path of the collection a manifest is created in."""
    return path(_checked(manifest), manifest["metadata"].get("namespace"))
