"""One step's per-position draft counts, as the vLLM add-on counts them.

The definition is ``goodput.reached_counts`` (a position the drafter did
not propose counts as reached and rejected); this is its vectorised form
for the engine's hot path, property-tested against it. Inputs are per
decoding sequence: the K it was scheduled with, its proposal length L <= K
and how many drafts the target accepted (<= L, a prefix).

With one K for the whole batch (vLLM's case) histograms suffice: position
i is reached by the sequences that accepted at least i - 1 drafts; of those,
it was proposed for the ones that went on to accept it and for the ones the
target stopped there by rejecting a proposed token (their proposal was
longer than what they accepted). Per-request K (the mixed scenario) takes a
(position x sequence) table instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from specdeploy.runtime.goodput import DraftCounts

IntArray = npt.NDArray[np.int64]


def _suffix(hist: IntArray) -> IntArray:
    """``out[i]`` = number of values >= i, from a histogram of values 0..n."""
    out: IntArray = np.cumsum(hist[::-1])[::-1]
    return out


def uniform_k_counts(k: int, lengths: IntArray | None, accepted: IntArray) -> DraftCounts:
    """Counts for one step at draft length ``k``; ``lengths`` None means every draft proposed."""
    n = int(accepted.size)
    if k <= 0:
        return DraftCounts([], [], [], [], [])
    at_least = _suffix(np.bincount(accepted, minlength=k + 1))
    reached = at_least[:k]
    acc = at_least[1 : k + 1]
    if lengths is None:
        return DraftCounts(reached.tolist(), reached.tolist(), acc.tolist(), [n] * k, [n] * k)
    offered = _suffix(np.bincount(lengths, minlength=k + 1))[1 : k + 1]
    stopped = np.bincount(accepted[lengths > accepted], minlength=k + 1)[:k]
    proposed = acc + stopped
    return DraftCounts(reached.tolist(), proposed.tolist(), acc.tolist(), offered.tolist(), [n] * k)


def per_sequence_k_counts(ks: IntArray, lengths: IntArray, accepted: IntArray) -> DraftCounts:
    """Counts for one step whose sequences were scheduled with different K (``ks``)."""
    positions = int(ks.max()) if ks.size else 0
    if positions <= 0:
        return DraftCounts([], [], [], [], [])
    pos = np.arange(positions)[:, None]
    scheduled = ks[None, :] > pos
    reached = scheduled & (accepted[None, :] >= pos)
    proposed = reached & (lengths[None, :] > pos)
    acc = scheduled & (accepted[None, :] > pos)
    offered = scheduled & (lengths[None, :] > pos)
    r, p, a, o, s = (m.sum(axis=1).tolist() for m in (reached, proposed, acc, offered, scheduled))
    return DraftCounts(r, p, a, o, s)
