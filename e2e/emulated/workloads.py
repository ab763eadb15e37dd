"""Traffic classes: how well the drafter does on a request, from the simulator's models.

A request names its class in the ``X-Specdeploy-Workload`` header (the load
generator sets it; default ``chat``). Each class is a pair from the
simulator: the acceptance given a proposal (``sim/acceptance.py``) and how
often and how long the drafter proposes (``sim/proposals.py``). Mapping
(modelled, like everything the simulator produces):

==========  =========================================  ==========================================
class       model drafters (EAGLE, EAGLE-3, MTP,        lookup drafters (n-gram, suffix)
            draft model: always K drafts)
==========  =========================================  ==========================================
``chat``    the preset's own acceptance: what its       the preset's own (bursty n-gram acceptance,
            profile was measured on                     ``CHAT_LOOKUP``: a draft on ~30% of steps)
``code``    the preset's curve moved to ``CODE_FIRST``  ``NGRAM_HIT`` acceptance (text that repeats
            at position 1 (the well-predicted class     its context), ``CODE_LOOKUP`` (a draft on
            of ``scenario_mixed``)                      ~60% of steps, long matches)
``random``  ``COLLAPSED_RATE`` at every position        the same, and ``RANDOM_LOOKUP``: a draft on
            (``scenario_collapse``'s collapse)          2% of steps, short: mostly nothing proposed
==========  =========================================  ==========================================

``chat`` is what the pool's profile describes, so a pod serving chat runs at
the profile's acceptance; ``code`` lifts it, ``random`` makes speculation a
pure loss (the adaptive policy should fall to K=0).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specdeploy.runtime.sim.acceptance import NGRAM_HIT, AcceptanceModel, Profile
from specdeploy.runtime.sim.presets import Preset
from specdeploy.runtime.sim.proposals import CODE_LOOKUP, LookupProposals, ProposalModel
from specdeploy.runtime.sim.scenario_collapse import COLLAPSED_RATE
from specdeploy.runtime.sim.scenario_mixed import A_FIRST

HEADER = "X-Specdeploy-Workload"

CODE_FIRST = A_FIRST
"""Position-1 acceptance of ``code`` traffic for model drafters (``scenario_mixed.A_FIRST``)."""
RANDOM_LOOKUP = LookupProposals(rate=COLLAPSED_RATE, continuation=0.2)
"""n-gram lookup on random text: a match is rare and rarely extends (modelled)."""


class Workload(StrEnum):
    """The traffic classes the header may name."""

    CHAT = "chat"
    CODE = "code"
    RANDOM = "random"


DEFAULT_WORKLOAD = Workload.CHAT


class WorkloadError(ValueError):
    """A header value that names no class; the message lists the known ones."""


def parse_workload(value: str | None) -> Workload:
    """The class a header value names (absent or empty: ``chat``), case-insensitive."""
    if value is None or not value.strip():
        return DEFAULT_WORKLOAD
    try:
        return Workload(value.strip().lower())
    except ValueError:
        known = ", ".join(w.value for w in Workload)
        raise WorkloadError(f"{HEADER}: {value!r} is not one of {known}") from None


@dataclass(frozen=True)
class ClassModel:
    """What the drafter does on one class of traffic."""

    acceptance: AcceptanceModel
    """Acceptance given a proposal."""
    proposals: ProposalModel


def class_models(preset: Preset) -> dict[Workload, ClassModel]:
    """The three classes on ``preset`` (module docstring)."""
    own = ClassModel(preset.acceptance, preset.proposal_model)
    positions = preset.acceptance.positions
    collapsed = Profile(tuple(COLLAPSED_RATE for _ in range(positions)))
    if preset.proposal_model.always_full:
        curve = Profile(tuple(preset.acceptance.nominal()))
        code = ClassModel(curve.scaled(CODE_FIRST), preset.proposal_model)
        random = ClassModel(collapsed, preset.proposal_model)
    else:
        code = ClassModel(NGRAM_HIT, CODE_LOOKUP)
        random = ClassModel(collapsed, RANDOM_LOOKUP)
    return {Workload.CHAT: own, Workload.CODE: code, Workload.RANDOM: random}
