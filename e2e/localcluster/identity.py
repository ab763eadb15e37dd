"""The operator's own identity on the local cluster: a ServiceAccount bound to its ClusterRole.

The operator never runs as the cluster's admin here (review M9): the harness
makes the ServiceAccount ``specdeploy-operator`` in ``specdeploy-system``,
binds it to the ClusterRole ``specdeploy operator rbac`` prints (the same
function), asks the TokenRequest API for a token and hands the operator a
kubeconfig that names the token file. Whatever the ClusterRole lacks fails
in the tests as a 403, which the API server's audit log records for that
user (``audit.py``), and whatever it grants but the operator never uses
shows up in ``audit.unused_grants``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from e2e.localcluster import kubeconfig
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.layout import Layout
from specdeploy.operator.builders.rbac import operator_cluster_role, operator_namespaced_roles
from specdeploy.runtime.kube import paths

NAMESPACE = "specdeploy-system"
ACCOUNT = "specdeploy-operator"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
"""The user name the API server (and its audit log) knows the operator by."""
NAMESPACED_ACCOUNT = "specdeploy-operator-namespaced"
"""The namespaced mode's identity: an account of its own, so that the cluster-wide
binding of ``ACCOUNT`` cannot lend it rights its Role lacks."""
NAMESPACED_USER = f"system:serviceaccount:{NAMESPACE}:{NAMESPACED_ACCOUNT}"
GRANTED_WITHOUT_A_REQUEST: dict[tuple[str, str, str], str] = {
    ("specdeploy.io", "speculativedeployments/finalizers", "update"): (
        "checked by the API server's OwnerReferencesPermissionEnforcement admission (on"
        " here) when a child's owner reference sets blockOwnerDeletion"
    ),
    **{
        ("specdeploy.io", "speculationprofiles", verb): (
            "held so that the operator may grant it to the profiler's Role (RBAC refuses to "
            "grant what the granter lacks); the profiler, not the operator, makes these"
        )
        for verb in ("get", "create", "update", "patch")
    },
}
"""Grants of the operator's ClusterRole that no request of its own exercises, and why."""
TOKEN_SECONDS = 48 * 3600
"""Longer than any session of tests or a demo; the API server's ceiling is far above it."""


def ensure(api: KubeApi, obj: Mapping[str, Any]) -> None:
    """Create ``obj``, or replace what has its name (a re-run after an edited ClusterRole)."""
    try:
        api.create(obj)
    except ApiError as err:
        if err.status != 409:
            raise
        path = paths.object_path(obj)
        current = api.get(path)
        body = {**obj, "metadata": {**obj["metadata"], **_version(current)}}
        api.request("PUT", path, body=body)


def _version(current: Mapping[str, Any]) -> dict[str, str]:
    return {"resourceVersion": current["metadata"]["resourceVersion"]}


def manifests(role: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The namespace, the ServiceAccount, the ClusterRole and its binding, in creation order."""
    cluster_role = dict(role or operator_cluster_role())
    return [*_account(ACCOUNT), cluster_role, _binding("ClusterRoleBinding", cluster_role, ACCOUNT)]


def _account(account: str) -> list[dict[str, Any]]:
    """The operator's namespace and its ServiceAccount ``account`` there."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": NAMESPACE},
        },
    ]


def _binding(kind: str, role: Mapping[str, Any], account: str) -> dict[str, Any]:
    meta = {k: v for k, v in role["metadata"].items() if k in ("name", "namespace")}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role["kind"],
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
    }


def namespaced_manifests(watched: str) -> list[dict[str, Any]]:
    """The namespaced mode: its account, a Role in ``watched`` and the cluster-scoped reads."""
    role, cluster_reads = operator_namespaced_roles(watched, name=NAMESPACED_ACCOUNT)
    return [
        *_account(NAMESPACED_ACCOUNT),
        role,
        _binding("RoleBinding", role, NAMESPACED_ACCOUNT),
        cluster_reads,
        _binding("ClusterRoleBinding", cluster_reads, NAMESPACED_ACCOUNT),
    ]


def install(
    api: KubeApi,
    layout: Layout,
    server: str,
    watched: str | None = None,
    *,
    path: Path | None = None,
) -> Path:
    """Make the identity and write the operator's kubeconfig; return its path.

    ``server``: the API server's URL, or a proxy in front of it (the chaos proxy,
    which forwards the bearer token; a client certificate could not pass it).
    ``watched``: the namespaced mode's one namespace (None: the whole cluster).
    ``path``: where the kubeconfig goes (default ``layout.kubeconfig("operator")``).
    """
    account = ACCOUNT if watched is None else NAMESPACED_ACCOUNT
    for obj in manifests() if watched is None else namespaced_manifests(watched):
        ensure(api, obj)
    token = api.request_token(NAMESPACE, account, seconds=TOKEN_SECONDS)
    target = path or layout.kubeconfig("operator")
    token_file = target.with_suffix(".token")
    token_file.write_text(token)
    token_file.chmod(0o600)
    doc = kubeconfig.document(
        server=server,
        ca_file=layout.pki.ca_cert,
        user=account,
        token_file=token_file,
    )
    return kubeconfig.write(target, doc)
