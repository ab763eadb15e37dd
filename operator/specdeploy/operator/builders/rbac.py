"""Least-privilege identity of the profiling Jobs, and the operator's own permissions.

A profiling pod may create, read and update SpeculationProfiles in its own
namespace, and nothing else: no Secrets, no other kinds, no other namespaces.
The three objects are shared by every profiling Job of a namespace (one
identity, one permission), so they carry no deployment label; the write
planner adds each deployment that needs them as an owner.
"""

from __future__ import annotations

from specdeploy.operator.api import DEPLOYMENT_PLURAL, GROUP, PROFILE_PLURAL
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


CHILD_VERBS = ("get", "list", "watch", "create", "patch", "delete")
"""On every kind the operator makes: watched, read, created (a POST, or an apply that
creates: the API server checks ``create`` inside that PATCH), patched (applies, owner
joins), deleted when no longer wanted. No ``update``: the operator never PUTs."""
NAMESPACED_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (GROUP, (DEPLOYMENT_PLURAL,), ("get", "list", "watch")),
    (GROUP, (PROFILE_PLURAL,), ("list", "watch", *PROFILER_VERBS)),
    (GROUP, (f"{DEPLOYMENT_PLURAL}/status", f"{PROFILE_PLURAL}/status"), ("patch",)),
    (GROUP, (f"{DEPLOYMENT_PLURAL}/finalizers",), ("update",)),
    ("", ("pods",), ("list",)),
    ("", ("events",), ("create",)),
    ("", ("configmaps", "serviceaccounts"), CHILD_VERBS),
    ("", ("services",), tuple(v for v in CHILD_VERBS if v != "delete")),
    ("apps", ("deployments",), CHILD_VERBS),
    ("batch", ("jobs",), CHILD_VERBS),
    ("policy", ("poddisruptionbudgets",), CHILD_VERBS),
    ("networking.k8s.io", ("networkpolicies",), CHILD_VERBS),
    # watched into the cache; only a deletion or a spec edit reconciles (handlers.py)
    ("autoscaling", ("horizontalpodautoscalers",), CHILD_VERBS),
    # listed, not watched: KEDA's API may come and go (the resync and telemetry restore one)
    ("keda.sh", ("scaledobjects",), tuple(v for v in CHILD_VERBS if v != "watch")),
    ("rbac.authorization.k8s.io", ("roles", "rolebindings"), CHILD_VERBS),
)
"""What the operator does inside the namespaces it serves, verb by verb (the audit log of
the e2e suite shows each used, ``e2e/tests/cluster/test_operator_least_privilege.py``):
its deployments read; profiles listed and watched, and the profiler's own verbs held
so that it may grant them (RBAC refuses to grant what the granter lacks); status
patched; ``finalizers`` update, checked by the API server when an owner reference sets
blockOwnerDeletion; pods listed for the pools' status; Events created. A pool's
Service lives as long as its deployment (the garbage collector removes it), so the
operator never deletes one."""
NODE_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("", ("nodes",), ("list", "watch")),
)
"""The one cluster-scoped read every mode needs: the GPU nodes discovery counts."""
CLUSTER_RULES = (
    *NODE_RULES,
    ("apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch")),
)
"""Cluster-wide, kopf also scans the CRDs, so that a CRD installed after the operator
starts is still served (the namespaced mode turns scanning off)."""


def _rules(
    table: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...],
) -> list[dict[str, list[str]]]:
    return [
        {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
        for group, resources, verbs in table
    ]


def leader_election_rules(lease: str = OPERATOR_LEASE) -> list[dict[str, list[str]]]:
    """The Lease the operator's replicas elect a leader with: read and renew that one only.

    RBAC cannot restrict ``create`` by name (the name is not known before the
    object exists), so ``create`` covers leases in general and ``get`` and
    ``update`` only the named one (``--leader-election-id``); no ``list``,
    ``watch``, ``patch`` or ``delete``, which the election never uses. In a
    Role (the namespaced mode) the same rules are confined to its namespace.
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
    """What the operator needs watching the whole cluster (the chart's default), with its
    leader election's Lease (``lease``) in any namespace (its own, by default)."""
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
        "rules": _rules(NAMESPACED_RULES + CLUSTER_RULES) + leader_election_rules(lease),
    }


def operator_namespaced_roles(
    namespace: str, name: str = "specdeploy-operator", *, lease: str = OPERATOR_LEASE
) -> list[Manifest]:
    """The namespaced mode (``specdeploy operator run --namespace NS``): a Role in ``namespace``
    for everything the operator does there, its Lease included (watching one namespace,
    the operator elects its leader there unless told otherwise), and a ClusterRole to
    read nodes alone (a Role cannot grant a cluster-scoped kind). Its CRDs must exist
    before it starts: with named namespaces kopf does not scan for CRDs."""
    labels = {MANAGED_BY[0]: MANAGED_BY[1]}
    return [
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": _rules(NAMESPACED_RULES) + leader_election_rules(lease),
        },
        {
            "apiVersion": RBAC_API,
            "kind": "ClusterRole",
            "metadata": {"name": f"{name}-cluster-reads", "labels": labels},
            "rules": _rules(NODE_RULES),
        },
    ]
