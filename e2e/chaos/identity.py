"""The operator's identity for chaos runs: a ServiceAccount token, the generated ClusterRole.

A TLS-terminating proxy cannot pass a client certificate on, so the operator
must authenticate with a bearer token, which the proxy forwards unchanged.
The token is a ServiceAccount's (TokenRequest API) bound to the ClusterRole
``specdeploy operator rbac`` generates, so every chaos scenario also runs the
operator with least privilege, never as cluster admin. The kubeconfig names
any server (the proxy's URL) and the cluster CA, which signed the proxy's
certificate (``tls``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from e2e.localcluster import kubeconfig
from e2e.localcluster.kubeapi import ApiError, KubeApi, Obj
from e2e.localcluster.layout import Layout
from specdeploy.operator.builders.rbac import operator_cluster_role

NAMESPACE = "specdeploy-system"
ACCOUNT = "specdeploy-operator"
ROLE = "specdeploy-chaos-operator"
TOKEN_SECONDS = 12 * 3600
"""Longer than the full matrix (about an hour), shorter than a day: tokens should expire."""


@dataclass(frozen=True)
class Identity:
    user: str
    """The name the audit log records (``system:serviceaccount:<ns>:<name>``)."""
    kubeconfig: Path


RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"


def _create(admin: KubeApi, obj: Obj, collection: str | None = None) -> None:
    """Create ``obj`` (in ``collection``, a path, for kinds the shared paths do not list)."""
    try:
        if collection is None:
            admin.create(obj)
        else:
            admin.post(collection, obj)
    except ApiError as err:
        if err.status != 409:
            raise


def _binding() -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }


def operator_identity(admin: KubeApi, layout: Layout, *, server: str) -> Identity:
    """Create the account and binding (idempotent); a kubeconfig for it that names ``server``."""
    _create(admin, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    _create(
        admin,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": NAMESPACE},
        },
    )
    _create(admin, operator_cluster_role(ROLE), f"{RBAC_PATH}/clusterroles")
    _create(admin, _binding(), f"{RBAC_PATH}/clusterrolebindings")
    token = admin.request_token(NAMESPACE, ACCOUNT, seconds=TOKEN_SECONDS)
    directory = layout.root / "chaos"
    directory.mkdir(parents=True, exist_ok=True)
    token_file = directory / "operator.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    doc = kubeconfig.document(
        server=server, ca_file=layout.pki.ca_cert, user=ACCOUNT, token_file=token_file
    )
    path = kubeconfig.write(directory / "operator.kubeconfig", doc)
    return Identity(f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}", path)
