"""Per-class proposal lengths and acceptance, drawn from the simulator's models."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from e2e.emulated.drafting import DraftSampler
from e2e.emulated.workloads import (
    DEFAULT_WORKLOAD,
    Workload,
    WorkloadError,
    class_models,
    parse_workload,
)
from specdeploy.runtime.sim.presets import get_preset

CLASSES = tuple(Workload)
SLOTS = 64


def draws(
    preset: str, workload: Workload, k: int, steps: int = 200, seed: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    models = class_models(get_preset(preset))
    sampler = DraftSampler([models[w] for w in CLASSES], SLOTS, seed)
    for slot in range(SLOTS):
        sampler.admit(slot, CLASSES.index(workload))
    decoding = np.arange(SLOTS, dtype=np.int64)
    got = [sampler.draw(decoding, k, step, 0.0) for step in range(steps)]
    lengths = np.concatenate([g[0] for g in got])
    accepted = np.concatenate([g[1] for g in got])
    return lengths, accepted


@pytest.mark.parametrize("preset", ["llama8b-eagle3-h200", "llama8b-ngram-a100"])
@pytest.mark.parametrize("workload", CLASSES)
def test_proposals_never_exceed_k_and_acceptance_never_exceeds_proposals(
    preset: str, workload: Workload
) -> None:
    lengths, accepted = draws(preset, workload, k=4, steps=50)
    assert lengths.min() >= 0 and lengths.max() <= 4
    assert (accepted >= 0).all() and (accepted <= lengths).all()


def test_model_drafters_always_propose_k_and_random_collapses_their_acceptance() -> None:
    chat_l, chat_a = draws("llama8b-eagle3-h200", Workload.CHAT, k=3)
    code_l, code_a = draws("llama8b-eagle3-h200", Workload.CODE, k=3)
    rand_l, rand_a = draws("llama8b-eagle3-h200", Workload.RANDOM, k=3)
    assert (chat_l == 3).all() and (rand_l == 3).all() and (code_l == 3).all()
    # position 1 of the preset's curve: 0.84 chat, 0.9 code (CODE_FIRST), 0.02 random
    first = [float(np.mean(a >= 1)) for a in (chat_a, code_a, rand_a)]
    assert first[0] == pytest.approx(0.84, abs=0.03)
    assert first[1] == pytest.approx(0.9, abs=0.03)
    assert first[2] < 0.05


def test_the_ngram_drafter_mostly_proposes_nothing_on_random_text() -> None:
    chat_l, _ = draws("llama8b-ngram-a100", Workload.CHAT, k=5)
    code_l, _ = draws("llama8b-ngram-a100", Workload.CODE, k=5)
    rand_l, rand_a = draws("llama8b-ngram-a100", Workload.RANDOM, k=5)
    rates = [float(np.mean(x > 0)) for x in (chat_l, code_l, rand_l)]
    assert rates[0] == pytest.approx(0.3, abs=0.03)  # CHAT_LOOKUP
    assert rates[1] == pytest.approx(0.6, abs=0.03)  # CODE_LOOKUP
    assert rates[2] < 0.05
    assert rand_a.sum() < 0.01 * rand_l.size


def test_k_zero_proposes_and_accepts_nothing() -> None:
    lengths, accepted = draws("llama8b-ngram-a100", Workload.CODE, k=0, steps=20)
    assert not lengths.any() and not accepted.any()


def test_the_same_seed_draws_the_same_stream_and_another_seed_does_not() -> None:
    a = draws("llama8b-eagle3-h200", Workload.CHAT, k=3, steps=30, seed=7)[1]
    b = draws("llama8b-eagle3-h200", Workload.CHAT, k=3, steps=30, seed=7)[1]
    c = draws("llama8b-eagle3-h200", Workload.CHAT, k=3, steps=30, seed=8)[1]
    assert (a == b).all() and not (a == c).all()


def test_a_mixed_batch_keeps_each_request_in_its_class() -> None:
    models = class_models(get_preset("llama8b-eagle3-h200"))
    sampler = DraftSampler([models[w] for w in CLASSES], 4, seed=1)
    sampler.admit(0, CLASSES.index(Workload.CHAT))
    sampler.admit(1, CLASSES.index(Workload.RANDOM))
    got = [sampler.draw(np.asarray([0, 1], dtype=np.int64), 3, s, 0.0)[1] for s in range(300)]
    chat, rand = (float(np.mean([g[i] for g in got])) for i in (0, 1))
    assert chat > 1.5 and rand < 0.1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, DEFAULT_WORKLOAD),
        ("", DEFAULT_WORKLOAD),
        ("Code", Workload.CODE),
        (" random ", Workload.RANDOM),
    ],
)
def test_the_header_names_a_class(value: str | None, expected: Workload) -> None:
    assert parse_workload(value) is expected


def test_an_unknown_class_is_an_error_listing_the_known_ones() -> None:
    with pytest.raises(WorkloadError, match="chat, code, random"):
        parse_workload("poetry")
