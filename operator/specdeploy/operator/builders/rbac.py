"""Least-privilege identity of the profiling Jobs, and the operator's own permissions.

A profiling pod may create, read and update SpeculationProfiles in its own
namespace, and nothing else: no Secrets, no other kinds, no other namespaces.
The three objects are shared by every profiling Job of a namespace (one
identity, one permission), so they carry no deployment label; the write
planner adds each deployment that needs them as an owner.
"""

from __future__ import annotations

from specdeploy.operator.api import GROUP, PLURAL, PROFILE_PLURAL
from specdeploy.operator.builders.common import (
    COMPONENT_LABEL,
    MANAGED_BY,
    PROFILING,
    Manifest,
)
from specdeploy.operator.naming import OPERATOR_LEASE, PROFILER_ACCOUNT

PROFILER_VERBS = ("create", "get", "update", "patch")
RBAC_API = "rbac.authorization.k8s.io/v1"


def _meta(namespace: str) -> dict[str, object]:
    return {
        "name": PROFILER_ACCOUNT,
        "namespace": namespace,
        "labels": {MANAGED_BY[0]: MANAGED_BY[1], COMPONENT_LABEL: PROFILING},
    }


def profiler_service_account(namespace: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(namespace)}


def profiler_rules() -> list[dict[str, list[str]]]:
    return [
        {"apiGroups": [GROUP], "resources": [PROFILE_PLURAL], "verbs": list(PROFILER_VERBS)},
    ]


def profiler_role(namespace: str) -> Manifest:
    return {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": _meta(namespace),
        "rules": profiler_rules(),
    }


def profiler_role_binding(namespace: str) -> Manifest:
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": _meta(namespace),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": PROFILER_ACCOUNT,
        },
        "subjects": [{"kind": "ServiceAccount", "name": PROFILER_ACCOUNT, "namespace": namespace}],
    }


def leader_election_rules(lease: str = OPERATOR_LEASE) -> list[dict[str, list[str]]]:
    """The Lease the operator's replicas elect a leader with: read and renew that one only.

    RBAC cannot restrict ``create`` by name (the name is not known before the
    object exists), so ``create`` covers leases in general and ``get`` and
    ``update`` only the named one; no ``list``, ``watch``, ``patch`` or
    ``delete``, which the election never uses. Bound through a RoleBinding
    in the operator's namespace instead of the ClusterRoleBinding, the same
    rules confine it to that namespace too.
    """
    group = "coordination.k8s.io"
    return [
        {"apiGroups": [group], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": [group],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        },
    ]


def operator_cluster_role(
    name: str = "specdeploy-operator", *, lease: str = OPERATOR_LEASE
) -> Manifest:
    """What the operator itself needs (for the chart): its kinds, children, nodes, events,
    and its leader election's Lease (``lease``: ``--leader-election-id``).

    It may grant the profiler's permissions because it holds them itself
    (RBAC forbids escalation), and it sets blockOwnerDeletion, which needs
    ``update`` on its resources' finalizers.
    """
    rules = [
        {
            "apiGroups": [GROUP],
            "resources": [PLURAL, PROFILE_PLURAL],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [GROUP],
            "resources": [f"{PLURAL}/status", f"{PROFILE_PLURAL}/status"],
            "verbs": ["get", "patch", "update"],
        },
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
        {"apiGroups": [GROUP], "resources": [PROFILE_PLURAL], "verbs": list(PROFILER_VERBS)},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps", "services", "serviceaccounts"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["batch"],
            "resources": ["jobs"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["policy"],
            "resources": ["poddisruptionbudgets"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["roles", "rolebindings"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        *leader_election_rules(lease),
    ]
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
        "rules": rules,
    }
