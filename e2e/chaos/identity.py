"""The operator's identity for chaos runs: its own ServiceAccount, reached through the proxy.

A TLS-terminating proxy cannot pass a client certificate on, so the operator
authenticates with a bearer token, which the proxy forwards unchanged. The
identity is the one every e2e test gives the operator (``e2e.localcluster.identity``:
a ServiceAccount bound to the ClusterRole ``specdeploy operator rbac``
generates), so every chaos scenario also runs it with least privilege; only
its kubeconfig names another server, the proxy, whose certificate the
cluster's CA signed (``tls``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from e2e.localcluster import identity
from e2e.localcluster.kubeapi import KubeApi
from e2e.localcluster.layout import Layout


@dataclass(frozen=True)
class Identity:
    user: str
    """The name the audit log records (``system:serviceaccount:<ns>:<name>``)."""
    kubeconfig: Path


def operator_identity(admin: KubeApi, layout: Layout, *, server: str) -> Identity:
    """The operator's identity (idempotent) and a kubeconfig for it that names ``server``."""
    directory = layout.root / "chaos"
    directory.mkdir(parents=True, exist_ok=True)
    path = identity.install(admin, layout, server, path=directory / "operator.kubeconfig")
    return Identity(identity.USER, path)
