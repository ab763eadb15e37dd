"""Apply CRD manifests server-side: what the chart's pre-install/pre-upgrade hook Job runs.

Helm installs a chart's ``crds/`` once and never upgrades them, so a chart
upgrade that changes a schema would leave the cluster on the old one. The
hook runs ``specdeploy operator crds --apply --from DIR`` in the operator's
own image, DIR being the chart's ``crds/`` mounted from a ConfigMap. A
server-side apply with a field manager of its own, forced, takes over the
fields Helm's first install set (the same values, until they change).

The hook's ClusterRole allows ``get`` and ``patch`` on the two CRDs by name
and nothing else (a CRD-creating identity could define any API), so the
CRDs must exist: Helm's ``crds/`` made them, or ``--skip-crds`` users did.
``requests_for`` is pure; ``apply`` sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import APPLY_PATCH, Request

FIELD_MANAGER = "specdeploy-crd-upgrade"
CRD_KIND = "CustomResourceDefinition"


class Sender(Protocol):
    def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = ..., query: Any = ...
    ) -> dict[str, Any]: ...


class NotACrd(ValueError):
    """A file in the directory holds something other than a CRD (named in the message)."""


def load(directory: Path) -> list[dict[str, Any]]:
    """The CRDs of ``directory/*.yaml`` (every document), in file order; anything else refused."""
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise NotACrd(f"{directory}: no *.yaml files")
    crds = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != CRD_KIND:
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                raise NotACrd(f"{path}: a {kind}, not a {CRD_KIND}")
            crds.append(doc)
    return crds


def requests_for(crds: Sequence[dict[str, Any]]) -> list[Request]:
    """One forced server-side apply per CRD, as this tool's own field manager."""
    return [
        Request(
            "PATCH",
            paths.path(CRD_KIND, name=crd["metadata"]["name"]),
            what=f"apply {CRD_KIND} {crd['metadata']['name']}",
            body=crd,
            content_type=APPLY_PATCH,
            query=(("fieldManager", FIELD_MANAGER), ("force", "true")),
        )
        for crd in crds
    ]


def apply(api: Sender, requests: Sequence[Request]) -> list[str]:
    """Send each request (an ``ApiError`` stops at the first refusal); returns what was done."""
    done = []
    for request in requests:
        api.request(
            request.method,
            request.path,
            body=request.body,
            content_type=request.content_type,
            query=request.query,
        )
        done.append(request.what)
    return done
