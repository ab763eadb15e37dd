"""K policies: the baselines and the adaptive policy, and one way to build any of them.

Everything that runs steps (the vLLM add-on, the simulator, the benchmarks)
talks to a policy through ``base.KPolicy``: ``choose_k`` per step,
``observe`` after it. The modules of this package:

* ``base``        the KPolicy protocol, and the reference conditional counts;
* ``static``      VanillaPolicy, FixedPolicy, TablePolicy (the baselines);
* ``adaptive``    AdaptivePolicy (goodput from live acceptance and
                  corrected step costs, hysteresis, bounded exploration);
* ``estimators``  the live estimators behind it;
* ``config``      AdaptiveConfig, its knobs and their defaults;
* ``report``      KEstimate and PolicyEstimates, what it reports;
* ``inputs``      validation of its inputs.
"""

from __future__ import annotations

from specdeploy.runtime.contract import Policy
from specdeploy.runtime.policy.adaptive import AdaptivePolicy
from specdeploy.runtime.policy.base import KPolicy
from specdeploy.runtime.policy.config import AdaptiveConfig
from specdeploy.runtime.policy.report import KEstimate, PolicyEstimates
from specdeploy.runtime.policy.static import FixedPolicy, TablePolicy, VanillaPolicy, static_lookup
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

VANILLA = "vanilla"
"""The benchmark's name for ``off``: no speculation configured at all."""
POLICY_KINDS = (*(p.value for p in Policy), VANILLA)
"""``spec.speculation.policy`` values (``contract.Policy``) plus ``vanilla``."""


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
    if kind in (Policy.OFF, VANILLA):
        return VanillaPolicy()
    if kind == Policy.FIXED:
        if fixed_k is None:
            raise ValueError("fixed_k: required by policy 'fixed'")
        return FixedPolicy(fixed_k)
    if kind not in (Policy.TABLE, Policy.ADAPTIVE):
        raise ValueError(f"kind: unknown policy {kind!r}, expected one of {list(POLICY_KINDS)}")
    if profile is None:
        raise ValueError(f"profile: required by policy {kind!r}")
    if kind == Policy.TABLE:
        return TablePolicy.from_profile(profile, max_batch_size=max_batch_size)
    return AdaptivePolicy.from_profile(profile, config, max_batch_size=max_batch_size)
