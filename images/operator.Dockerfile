# syntax=docker/dockerfile:1
#
# specdeploy operator image: the kopf controller (`specdeploy operator run`).
# No vLLM, no GPU libraries.
#
# Build from the repository root:
#   docker build -f images/operator.Dockerfile -t specdeploy-operator:0.1.0 .
#
# tests/unit/test_images.py checks this file statically (no container engine
# in CI here): the ENTRYPOINT and CMD parse with the real CLI, USER is non-root.
# At release, pin the base image by digest: python:3.11-slim@sha256:<digest>.

# --- 1. wheels: specdeploy and everything `specdeploy[operator]` needs ---
FROM python:3.11-slim AS wheels
WORKDIR /src
COPY pyproject.toml README.md ./
COPY specdeploy/ specdeploy/
COPY operator/ operator/
COPY runtime/ runtime/
COPY constraints/dev.txt constraints/dev.txt
# The operator's dependencies at the versions CI tests (constraints/dev.txt).
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints/dev.txt ".[operator]"

# --- 2. the operator image: installs only from those wheels, offline ---
FROM python:3.11-slim
COPY --from=wheels /wheels/ /tmp/wheels/
RUN pip install --no-cache-dir --no-index --find-links=/tmp/wheels /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && python -c "import kopf, specdeploy.operator.main"

RUN useradd --no-log-init --create-home --uid 10001 --home-dir /home/specdeploy specdeploy
ENV PYTHONUNBUFFERED=1
WORKDIR /home/specdeploy
USER 10001

# kopf's liveness endpoint (CMD's default; the Deployment may override the args)
# and the operator's Prometheus /metrics (`--metrics-port`, default 9401).
EXPOSE 8080 9401
ENTRYPOINT ["specdeploy", "operator", "run"]
CMD ["--liveness=http://0.0.0.0:8080/healthz"]
