"""Kubernetes conditions: building one, and merging new ones into those recorded. Pure.

Shared by the deployment's status (``decision.status``), telemetry's health
(``telemetry.health``) and the profiles' live status
(``telemetry.profile_live``), so it sits below all three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specdeploy.operator.api import Condition, ConditionStatus

_BY_TRUTH = {
    True: ConditionStatus.TRUE,
    False: ConditionStatus.FALSE,
    None: ConditionStatus.UNKNOWN,
}


def condition(
    kind: str, status: ConditionStatus | bool | None, reason: str, message: str = ""
) -> Condition:
    """A condition; ``status`` True/False/None stand for "True"/"False"/"Unknown"."""
    if not isinstance(status, ConditionStatus):
        status = _BY_TRUTH[status]
    return Condition(type=kind, status=status, reason=reason, message=message)


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Condition], *, now: str, generation: int
) -> tuple[Condition, ...]:
    """New conditions, keeping each one's lastTransitionTime unless its status changed."""
    before = {c.get("type"): c for c in old}
    merged = []
    for cond in new:
        prior = before.get(cond.type)
        same = prior is not None and prior.get("status") == cond.status.value
        since = str(prior.get("lastTransitionTime")) if same and prior else now
        merged.append(
            cond.model_copy(
                update={"last_transition_time": since, "observed_generation": generation}
            )
        )
    return tuple(merged)


__all__ = ["condition", "merge_conditions"]
