"""A pool's profile fingerprint, and the profile name it maps to.

The fingerprint holds everything that changes step cost or acceptance
(``runtime.profile.Fingerprint``); deployments with equal fingerprints share one
SpeculationProfile, named ``p-<digest>``, so profiling is never repeated
without a reason. The ``sim`` backend's engine is the simulator's own
(``vllm-sim``) and names the preset modelled: a modelled profile never stands
in for a measured one, nor for another preset's.
"""

from __future__ import annotations

from specdeploy.operator.api import ProfilerBackend, SpeculativeDeploymentSpec
from specdeploy.runtime.profile import SIM_ENGINE, Fingerprint


def engine(spec: SpeculativeDeploymentSpec) -> str:
    if spec.profiling.backend is ProfilerBackend.SIM:
        return f"{SIM_ENGINE}/{spec.profiling.sim_preset}"
    return "vllm"


def pool_fingerprint(
    spec: SpeculativeDeploymentSpec, *, gpu_type: str, gpus_per_replica: int
) -> Fingerprint:
    return Fingerprint(
        model=spec.model.name,
        model_revision=spec.model.revision,
        method=spec.speculation.method.value,
        draft_model=spec.speculation.draft_model,
        draft_revision=spec.speculation.draft_revision,
        gpu_type=gpu_type,
        gpus_per_replica=gpus_per_replica,
        dtype=spec.model.dtype,
        engine=engine(spec),
        engine_version=spec.vllm.engine_version,
        max_k=spec.speculation.max_k,
    )


def profile_name(fingerprint: Fingerprint) -> str:
    """``p-<digest>`` (``Fingerprint.profile_name``, the one rule)."""
    return fingerprint.profile_name()
