"""vLLM's CPU build drafting with an EAGLE head saved by ``runtime.models.eagle``.

The first test saves an untrained head (seconds) and checks that vLLM loads
that layout and drafts with it. The second uses the trained ``smollm2-eagle``
when it is already in the cache (training it takes ~17 min on one core:
``python -m e2e.models.eagle``) and checks it is accepted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

TIMEOUT_S = 900

SAVE_UNTRAINED = """
import sys
from pathlib import Path
from e2e.models import eagle, smollm2
target = smollm2.ensure_checkpoint()
config = __import__("json").loads((target / "config.json").read_text())
shape = eagle.Shape.of(config)
params = eagle.init_head(shape, int(config["intermediate_size"]), seed=0)
eagle.save_head(params, target, Path(sys.argv[1]))
"""

TRAINED_FOLDER = """
from e2e.models import eagle, smollm2
folder = eagle.head_dir()
print(folder if smollm2.is_complete(folder) else "")
"""


def _run(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(python), *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _measure(
    python: Path, env: dict[str, str], draft: str, out: Path, cells: str, steps: int
) -> dict[str, int | list[int]]:
    _run(
        python,
        env,
        *("-m", "specdeploy.runtime.profiler.vllm_backend", "--model", "smollm2"),
        *("--method", "eagle", "--draft-model", draft, "--max-k", "3"),
        *("--cells", cells, "--steps", str(steps), "--prompts", "8"),
        *("--out", str(out)),
    )
    doc = json.loads(out.read_text())
    assert doc["fingerprint"]["method"] == "eagle"
    cell: dict[str, int | list[int]] = doc["cells"][0]
    return cell


def test_vllm_loads_and_drafts_with_a_saved_head(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    head = tmp_path / "head"
    _run(vllm_python, vllm_env, "-c", SAVE_UNTRAINED, str(head))
    assert json.loads((head / "config.json").read_text())["num_hidden_layers"] == 1
    cell = _measure(vllm_python, vllm_env, str(head), tmp_path / "cells.json", "1:3", 4)
    assert cell["drafts_per_seq_step"] == 3
    drafted = cell["drafted"]
    assert isinstance(drafted, list) and drafted[0] > 0


def test_the_trained_head_is_accepted(
    vllm_python: Path, vllm_env: dict[str, str], tmp_path: Path
) -> None:
    folder = _run(vllm_python, vllm_env, "-c", TRAINED_FOLDER).stdout.strip()
    if not folder:
        pytest.skip("smollm2-eagle is not trained here: python -m e2e.models.eagle")
    cell = _measure(vllm_python, vllm_env, "smollm2-eagle", tmp_path / "cells.json", "4:3", 16)
    drafted, accepted = cell["drafted"], cell["accepted"]
    assert isinstance(drafted, list) and isinstance(accepted, list)
    assert drafted[0] == 64
    # Measured 0.22 at position 1 (profiles/README.md): far from usable, but well
    # above an untrained head's 0, which is what this guards.
    assert accepted[0] / drafted[0] >= 0.08
