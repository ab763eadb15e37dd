"""The SpeculativeDeployment's OpenAPI schema, as the CRD in ``crds/`` states it.

The fuzzer draws from the schema the API server enforces, not from the
pydantic models that generate it, so a difference between the two (a bound
the models state and the CRD lost) shows up as an accepted spec the operator
then refuses, or a 422 the operator never sees.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from e2e.localcluster.binaries import repo_root

Node = dict[str, Any]
CRD_FILE = "specdeploy.io_speculativedeployments.yaml"


@cache
def spec_schema(crds: Path | None = None) -> Node:
    """``spec``'s schema node of the served version (the storage version)."""
    path = (crds or repo_root() / "crds") / CRD_FILE
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    node: Node = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return node


def rules(node: Node) -> list[str]:
    """The CEL rules of a node (``x-kubernetes-validations``), for reporting."""
    return [v["rule"] for v in node.get("x-kubernetes-validations", [])]
