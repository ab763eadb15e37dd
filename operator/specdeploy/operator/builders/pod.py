"""Pod fragments shared by the profiling Job and the serving Deployment."""

from __future__ import annotations

from collections.abc import Mapping

from specdeploy.operator.api import SpeculativeDeploymentSpec

HF_TOKEN_ENV = "HF_TOKEN"


def hf_token_env(spec: SpeculativeDeploymentSpec) -> list[dict[str, object]]:
    """HF_TOKEN from the model's token Secret, when it names one."""
    ref = spec.model.token_secret_ref
    if ref is None:
        return []
    selector = {"name": ref.name, "key": ref.key}
    return [{"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": selector}}]


def scheduling(spec: SpeculativeDeploymentSpec, pin: Mapping[str, str]) -> dict[str, object]:
    """nodeSelector (the spec's, plus ``pin``) and tolerations for a pod spec."""
    fragment: dict[str, object] = {"nodeSelector": {**(spec.node_selector or {}), **pin}}
    if spec.tolerations:
        fragment["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations
        ]
    return fragment
