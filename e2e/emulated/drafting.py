"""Per step, per decoding request: how many drafts were proposed and how many were accepted.

The engine keeps its requests in batch slots (``max_num_seqs`` of them, as the
simulator's engine does); each slot carries its request's traffic class
(``workloads``). A step asks once for every decoding slot at the step's K:

* the proposal length L <= K from the class's proposal model (always K for
  model drafters; lookup drafters often fewer, or none);
* the accepted count <= L from the class's acceptance model, which may keep
  state per slot (n-gram bursts), reset when a new request takes the slot.

One uniform per slot and step for acceptance and two for the proposal, drawn
for every slot whatever K is (as ``sim/engine.py`` does), from generators
seeded once: a server started with the same seed and fed the same requests
in the same order draws the same stream. Modelled, not measured.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from e2e.emulated.workloads import ClassModel

IntArray = npt.NDArray[np.int64]


class DraftSampler:
    """Proposal lengths and accepted counts for the slots of one engine."""

    def __init__(self, classes: Sequence[ClassModel], slots: int, seed: int) -> None:
        if slots < 1 or not classes:
            raise ValueError("need at least one slot and one class")
        streams = np.random.SeedSequence([seed, 0xE7A1]).spawn(2 + len(classes))
        self._u = np.random.default_rng(streams[0])
        self._proposal = np.random.default_rng(streams[1])
        self._models = tuple(classes)
        self._samplers = tuple(
            m.acceptance.sampler(slots, np.random.default_rng(s))
            for m, s in zip(classes, streams[2:], strict=True)
        )
        self._class_of: IntArray = np.zeros(slots, dtype=np.int64)
        self.slots = slots

    def admit(self, slot: int, class_index: int) -> None:
        """A new request of class ``class_index`` took ``slot``."""
        self._class_of[slot] = class_index
        self._samplers[class_index].admit(np.asarray([slot], dtype=np.int64))

    def draw(self, decoding: IntArray, k: int, step: int, t: float) -> tuple[IntArray, IntArray]:
        """(L, accepted) for each slot in ``decoding`` (slot indexes) at draft length ``k``."""
        n = self.slots
        u = self._u.random(n)
        exists_u = self._proposal.random(n)
        length_u = self._proposal.random(n)
        mask = np.zeros(n, dtype=bool)
        mask[decoding] = True
        lengths: IntArray = np.zeros(n, dtype=np.int64)
        accepted: IntArray = np.zeros(n, dtype=np.int64)
        for c, (model, sampler) in enumerate(zip(self._models, self._samplers, strict=True)):
            mine = mask & (self._class_of == c)
            if not mine.any():
                continue
            got = sampler.accepted(u, mine, k, step, t)
            if model.proposals.always_full:
                proposed = np.full(n, max(k, 0), dtype=np.int64)
            else:
                proposed = model.proposals.lengths(exists_u, length_u, k)
            lengths = np.where(mine, proposed, lengths)
            accepted = np.where(mine, np.minimum(got, proposed), accepted)
        return lengths[decoding], accepted[decoding]
