"""Re-deriving a profile from its raw file: old counts reconstructed, new ones read as they are."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy.runtime.profile import Fingerprint, Source, SpeculationProfile, parse_profile
from specdeploy.runtime.profiler.from_raw import (
    REDERIVED_ANNOTATION,
    RawFileError,
    cells_of,
    rederive,
)

FINGERPRINT = Fingerprint(model="m", method="ngram", gpu_type="cpu", max_k=2)


def old_raw() -> dict[str, Any]:
    """A raw file of before the reached counts: ``drafted`` only where a draft was proposed."""
    return {
        "profile": "p-old",
        "source": "measured",
        "search": "smart",
        "cells": [
            {"batchSize": 2, "k": 0, "stepSeconds": [0.1, 0.1], "drafted": [], "accepted": []},
            # 8 sequence-steps, 4 proposed a draft, 3 accepted it.
            {"batchSize": 2, "k": 1, "stepSeconds": [0.15] * 4, "drafted": [4], "accepted": [3]},
            # 8 sequence-steps, 2 proposed two drafts: one accepted both, one neither.
            {
                "batchSize": 2,
                "k": 2,
                "stepSeconds": [0.2] * 4,
                "drafted": [2, 1],
                "accepted": [1, 1],
            },
        ],
    }


def like() -> SpeculationProfile:
    return parse_profile(
        {
            "apiVersion": "specdeploy.io/v1alpha1",
            "kind": "SpeculationProfile",
            "metadata": {"name": "p-old", "annotations": {"specdeploy.io/profile-cells": "3"}},
            "spec": {
                "fingerprint": FINGERPRINT.model_dump(by_alias=True),
                "source": "measured",
                "dataset": "mt-bench",
                "measurements": [
                    {"batchSize": 2, "k": 0, "itlMs": 100.0},
                    {"batchSize": 2, "k": 1, "itlMs": 150.0, "acceptanceLength": 1.75},
                ],
                "acceptance": {"perPosition": [0.75, 1.0]},
            },
        }
    )


def test_old_counts_are_reconstructed_with_every_sequence_step_reaching_position_one() -> None:
    found = cells_of(old_raw())
    assert found.reconstructed
    one, two = found.cells[1], found.cells[2]
    assert (one.drafted, one.proposed, one.accepted) == ([8], [4], [3])
    assert (two.drafted, two.proposed, two.accepted) == ([8, 1], [2, 1], [1, 1])
    assert two.scheduled == [8, 8] and two.offered == [2, 2]  # position 2: estimated
    assert (one.verified_tokens, two.verified_tokens) == (12, 12)
    assert found.cells[0].verified_tokens == 4  # K=0: one token per sequence-step


def test_an_old_raw_file_gives_the_acceptance_of_the_one_definition() -> None:
    doc = rederive(old_raw(), like=like(), source_name="/x/p-old.raw.json")
    spec = doc.spec
    assert spec.source is Source.MEASURED and spec.dataset == "mt-bench"
    assert spec.fingerprint == FINGERPRINT
    acc = spec.acceptance
    assert acc.per_position == (0.25, 1.0)  # 4 of 16 reached sequence-steps accepted position 1
    assert acc.drafting_rate == (0.375, 1.0)
    assert acc.proposal_survival == (0.375, 0.375)
    assert (acc.reached, acc.proposed, acc.accepted) == ((16, 1), (6, 1), (4, 1))
    rows = {m.k: m for m in spec.measurements}
    assert rows[1].acceptance_length == 1.375 and rows[2].acceptance_length == 1.25
    assert (rows[1].drafting_rate, rows[2].drafting_rate) == (0.5, 0.25)
    assert rows[1].verified_tokens == rows[2].verified_tokens == 1.5
    assert rows[0].itl_ms == 100.0 and rows[2].itl_ms == 200.0
    # goodput 10 (K=0) against 1.25/0.15 = 8.3 and 1.5/0.2 = 7.5: plain K=0.
    assert spec.schedule == ((1, 2, 0),)
    annotations = doc.metadata.annotations or {}
    assert annotations[REDERIVED_ANNOTATION].startswith("p-old.raw.json: counts reconstructed")
    assert annotations["specdeploy.io/profile-cells"] == "3"
    assert doc.metadata.name == "p-old"


def test_a_current_raw_file_is_read_as_it_is() -> None:
    raw = {
        "counts": "reached",
        "source": "measured",
        "fingerprint": FINGERPRINT.model_dump(mode="json", by_alias=True),
        "dataset": "sharegpt",
        "cells": [
            {"batchSize": 1, "k": 0, "stepSeconds": [0.1], "reached": [], "accepted": []},
            {
                "batchSize": 1,
                "k": 2,
                "stepSeconds": [0.2, 0.2],
                "reached": [2, 1],
                "proposed": [1, 1],
                "accepted": [1, 0],
                "offered": [1, 1],
                "scheduled": [2, 2],
                "sequenceSteps": 2,
                "verifiedTokens": 4,
                "contextTokens": 600,
            },
        ],
        "baseline": [
            {
                "batchSize": 1,
                "k": 0,
                "stepSeconds": [0.09, 0.09],
                "sequenceSteps": 2,
                "contextTokens": 500,
                "reached": [],
                "accepted": [],
            },
        ],
    }
    doc = rederive(raw)
    spec = doc.spec
    assert spec.dataset == "sharegpt" and not cells_of(raw).reconstructed
    assert spec.acceptance.per_position == (0.5, 0.0)
    row = spec.measurements[1]
    assert (row.verified_tokens, row.context_tokens, row.drafting_rate) == (2.0, 300.0, 0.5)
    assert [(b.batch_size, b.itl_ms, b.context_tokens) for b in spec.baseline] == [(1, 90.0, 250.0)]
    assert REDERIVED_ANNOTATION in (doc.metadata.annotations or {})


def test_a_raw_file_without_a_fingerprint_needs_the_profile_it_came_from() -> None:
    with pytest.raises(RawFileError, match="records no fingerprint"):
        rederive(old_raw())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drafted": [9], "accepted": [3]}, "need accepted <= drafted <= reached"),
        ({"accepted": [9]}, "need accepted <= drafted <= reached"),
        ({"stepSeconds": []}, "positive step times"),
        ({"drafted": [1.5]}, "whole count"),
        ({"drafted": "4"}, "expected a list"),
    ],
)
def test_a_broken_cell_is_refused_naming_it(change: dict[str, Any], message: str) -> None:
    raw = old_raw()
    raw["cells"][1] = {**raw["cells"][1], **change}
    with pytest.raises(RawFileError, match=message) as err:
        cells_of(raw)
    assert "cells[1]" in str(err.value)
