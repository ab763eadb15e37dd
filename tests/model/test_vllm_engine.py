"""The real engine on CPU: SmolLM2-135M with n-gram drafts, a tiny grid.

Each test starts vLLM (about 30-60 s on two cores once the model is
converted; the first run converts it, about a minute more).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from specdeploy.runtime.profile import parse_profile
from specdeploy.runtime.schedule import schedule_problems

TIMEOUT_S = 900


def _run(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(python), *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_measures_fixed_batches_with_forced_k_and_conditional_counts(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "cells.json"
    _run(
        vllm_python,
        vllm_env,
        *("-m", "specdeploy.runtime.profiler.vllm_backend", "--model", "smollm2"),
        *("--method", "ngram", "--max-k", "2", "--cells", "1:0,2:2", "--steps", "6"),
        *("--prompts", "4", "--out", str(out)),
    )
    doc = json.loads(out.read_text())
    assert doc["fingerprint"]["engine"] == "vllm-cpu"
    assert doc["fingerprint"]["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert doc["fingerprint"]["gpuType"].startswith("CPU-")
    k0, k2 = doc["cells"]
    assert (k0["batch_size"], k0["k"], k0["drafted"]) == (1, 0, [])
    assert k0["drafts_per_seq_step"] == 0
    assert (k2["batch_size"], k2["k"]) == (2, 2)
    for cell in (k0, k2):
        assert len(cell["step_seconds"]) == 6
        assert all(0 < s < 60 for s in cell["step_seconds"])
    drafted, accepted = k2["drafted"], k2["accepted"]
    assert 0 < k2["drafts_per_seq_step"] <= 2
    assert drafted[0] > 0
    assert all(a <= d for a, d in zip(accepted, drafted, strict=True))
    # Conditional denominators: position 2 is drafted only after position 1 was accepted.
    assert drafted[1] <= accepted[0]


def test_profile_command_writes_a_measured_profile_with_a_valid_schedule(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    out, raw = tmp_path / "profile.yaml", tmp_path / "raw.json"
    specdeploy = vllm_python.parent / "specdeploy"
    _run(
        specdeploy,
        vllm_env,
        *("profile", "--backend", "vllm", "--model", "smollm2", "--method", "ngram"),
        *("--max-k", "2", "--batch-sizes", "1,2", "--steps", "4", "--search", "exhaustive"),
        *("--min-repeats", "1", "--max-repeats", "1", "--prompts", "4"),
        *("--out", str(out), "--raw", str(raw)),
        *("--termination-log", str(tmp_path / "termination-log")),
    )
    profile = parse_profile(yaml.safe_load(out.read_text()))
    assert profile.spec.source == "measured"
    assert profile.spec.fingerprint.engine == "vllm-cpu"
    assert {(m.batch_size, m.k) for m in profile.spec.measurements} == {
        (bs, k) for bs in (1, 2) for k in (0, 1, 2)
    }
    assert profile.spec.schedule is not None
    assert not list(schedule_problems(profile.spec.schedule, max_k=2))


def test_a_missing_model_folder_is_a_deterministic_failure(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            *(str(vllm_python), "-m", "specdeploy.runtime.profiler.vllm_backend"),
            *("--model", str(tmp_path / "nowhere"), "--prompts", "1"),
        ],
        env=vllm_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "does not exist" in done.stderr


def test_the_converted_checkpoint_answers_like_the_model(
    vllm_python: Path, vllm_env: dict[str, str]
) -> None:
    script = (
        "from e2e.models import smollm2\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "folder = smollm2.ensure_checkpoint()\n"
        "tok = AutoTokenizer.from_pretrained(folder)\n"
        "model = AutoModelForCausalLM.from_pretrained(folder)\n"
        "chat = [{'role': 'user', 'content': 'What is the capital of France?'}]\n"
        "ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors='pt',"
        " return_dict=True)['input_ids']\n"
        "out = model.generate(ids, max_new_tokens=12, do_sample=False)\n"
        "print(tok.decode(out[0][ids.shape[1]:]))\n"
    )
    done = _run(vllm_python, vllm_env, "-c", script)
    assert "Paris" in done.stdout


def test_a_draft_trains_on_the_targets_greedy_outputs(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from e2e.models import drafts, smollm2\n"
        "recipe = drafts.Recipe(conversations=4, held_out=1, epochs=1, answer_tokens=6, batch=2)\n"
        "folder = drafts.ensure_draft('smollm2-distilled', target=smollm2.ensure_checkpoint(),"
        " root=Path(sys.argv[1]), recipe=recipe)\n"
        "print(json.dumps({'folder': str(folder), **drafts.report(folder)}))\n"
    )
    done = _run(vllm_python, vllm_env, "-c", script, str(tmp_path))
    report = json.loads(done.stdout.strip().splitlines()[-1])
    folder = Path(report["folder"])
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 4
    assert (folder / "tokenizer.json").is_file()
    assert len(report["acceptance_per_position"]) == 8
    assert report["train_tokens"] > 0
