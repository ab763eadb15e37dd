"""Kubeconfig documents for the admin, the components and pods run by the stand-in.

File paths rather than embedded data, so that the shared client (the
official loader behind ``specdeploy.runtime.kube.config``), kubectl and helm
read the same files a user's kubeconfig would name. Pure apart from ``write``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CLUSTER = "specdeploy-local"


def document(
    *,
    server: str,
    ca_file: Path,
    user: str,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    token_file: Path | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """One cluster, one user, one current context."""
    credentials: dict[str, str] = {}
    if cert_file is not None and key_file is not None:
        credentials = {"client-certificate": str(cert_file), "client-key": str(key_file)}
    if token_file is not None:
        credentials["tokenFile"] = str(token_file)
    context: dict[str, str] = {"cluster": CLUSTER, "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CLUSTER, "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CLUSTER, "context": context}],
        "current-context": CLUSTER,
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
