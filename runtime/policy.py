"""K policies: the baselines and the adaptive policy, and one way to build any of them.

Everything that runs steps (the vLLM add-on, the simulator, the emulated
pods) talks to a policy through ``kpolicy.KPolicy``: ``choose_k`` per step,
``observe`` after it. The implementations live in

* ``policy_static``    VanillaPolicy, FixedPolicy, TablePolicy (the baselines);
* ``policy_adaptive``  AdaptivePolicy (goodput from live acceptance and
                       corrected step costs, hysteresis, bounded exploration);
* ``policy_estimators`` the live estimators behind it;
* ``policy_config``    AdaptiveConfig, its knobs and their defaults;
* ``policy_report``    KEstimate and PolicyEstimates, what it reports;
* ``policy_inputs``    validation of its inputs.
"""

from __future__ import annotations

from specdeploy.runtime.kpolicy import KPolicy
from specdeploy.runtime.policy_adaptive import AdaptivePolicy
from specdeploy.runtime.policy_config import AdaptiveConfig
from specdeploy.runtime.policy_report import KEstimate, PolicyEstimates
from specdeploy.runtime.policy_static import FixedPolicy, TablePolicy, VanillaPolicy, static_lookup
from specdeploy.runtime.profile import ProfileSpec, SpeculationProfile

__all__ = [
    "POLICY_KINDS",
    "AdaptiveConfig",
    "AdaptivePolicy",
    "FixedPolicy",
    "KEstimate",
    "PolicyEstimates",
    "TablePolicy",
    "VanillaPolicy",
    "build_policy",
    "static_lookup",
]

POLICY_KINDS = ("adaptive", "table", "fixed", "off", "vanilla")
"""``spec.speculation.policy`` values (plus ``vanilla``, the benchmark's name for ``off``)."""


def build_policy(
    kind: str,
    profile: SpeculationProfile | ProfileSpec | None = None,
    *,
    fixed_k: int | None = None,
    config: AdaptiveConfig | None = None,
    max_batch_size: int | None = None,
) -> KPolicy:
    """The policy a deployment's ``speculation.policy`` asks for.

    ``off`` and ``vanilla`` mean no speculation; ``fixed`` needs ``fixed_k``;
    ``table`` and ``adaptive`` need the profile.
    """
    if kind in ("off", "vanilla"):
        return VanillaPolicy()
    if kind == "fixed":
        if fixed_k is None:
            raise ValueError("fixed_k: required by policy 'fixed'")
        return FixedPolicy(fixed_k)
    if kind not in ("table", "adaptive"):
        raise ValueError(f"kind: unknown policy {kind!r}, expected one of {list(POLICY_KINDS)}")
    if profile is None:
        raise ValueError(f"profile: required by policy {kind!r}")
    if kind == "table":
        return TablePolicy.from_profile(profile, max_batch_size=max_batch_size)
    return AdaptivePolicy.from_profile(profile, config, max_batch_size=max_batch_size)
