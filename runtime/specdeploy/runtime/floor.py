"""The plain-decoding floor: does speculation beat not speculating, at the batch sizes served?

K=0 with speculation configured is not plain decoding (the drafter's sync
pass, the speculation bookkeeping, piecewise graphs cost +7-22% upstream,
vLLM #49548), and a running pod cannot switch speculation off: only a
Deployment without ``--speculative-config`` can. So the decision is the
operator's (and the simulator's ``specdeploy`` policy models it with this
same function), from the profile's plain-decoding baseline
(``ProfileSpec.baseline``) and its cost model: the predicted gain of the best
K over plain decoding (``schedule.vanilla_gain``) at each batch size the
pool serves. Until the telemetry loop reports the batch sizes a pool
actually serves, those are the profiled ones the spec asked for
(``spec.profiling.batchSizes``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdeploy.runtime.profile import ProfileSpec
from specdeploy.runtime.schedule import vanilla_gain


@dataclass(frozen=True)
class FloorVerdict:
    """What the profile predicts against plain decoding for one pool."""

    gain: float | None
    """Mean over the served batch sizes of best-K goodput / plain decoding's
    (None: the profile has no baseline, so nothing can say)."""
    loses: bool
    """Speculation is predicted slower than plain decoding at every served size."""
    sizes: tuple[int, ...]


def judge(profile: ProfileSpec, served: Sequence[int]) -> FloorVerdict:
    """The verdict at the ``served`` batch sizes the profile covers."""
    gains = vanilla_gain(profile)
    if gains is None:
        return FloorVerdict(None, False, ())
    top = gains.shape[0] - 1
    sizes = tuple(sorted({min(bs, top) for bs in served if bs >= 1}))
    values = [float(gains[bs]) for bs in sizes if np.isfinite(gains[bs])]
    if not values:
        return FloorVerdict(None, False, ())
    return FloorVerdict(round(float(np.mean(values)), 4), all(v < 1.0 for v in values), sizes)
