# Every target sets itself up from a fresh clone: the venv is built from the pinned lock on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: run airflow test test-browser-e2e test-unit-integration test-unit-integration-then-real test-full test-real realcluster lint demo bench bench-full venv clean

venv: $(STAMP)

# The lock is installed with uv (the tool that compiles it, requirements.txt's header), pinned here: 13 s for
# a fresh venv against pip's 72 s on the 2-core machine (2026-12-05), which every fresh clone's `make test`
# pays before anything else. Bytecode is compiled at install, as pip does: the environment may set
# PYTHONDONTWRITEBYTECODE, and every Airflow process would then compile Airflow from source.
UV_VERSION := 0.13.9
$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $@

# Knobs (README "make run"): AIRFLOW_PORT, TIME_SCALE, CLUSTER=kubesim|real|kubeconfig, KUBECONFIG, UNPAUSE.
# CLUSTER=real builds the real control plane's programs first when they are missing (realcluster/README.md).
run: venv $(if $(filter real,$(CLUSTER)),realcluster)
	$(BIN)/python -m devtools.run

# The airflow CLI against `make run`'s Airflow, e.g. make airflow ARGS="dags list"
airflow: venv
	@$(BIN)/python -m devtools.cli $(ARGS)

# Side by side from the start (--output-sync: each side's output is printed whole when it ends), because
# every part of the suite mostly waits (on simulated time, Airflow's loops, real Kueue's reconciles) and
# leaves much of two cores idle: a warm .ci/run took 18.5-22.5 min instead of 24.7 (realcluster/README.md, CI).
# The two tests that failed once in four such runs under the load (a test race, a comparison of unlike
# windows) wait for what they read and compare like with like now:
# - the browser and e2e tests in two xdist groups (tests/conftest.py): the browser tests and test_00's
#   `make run` starts one after another in one worker, the e2e session's shared Airflow in the other;
# - the tests without an Airflow of their own (each xdist worker starts its own kubesim), then, where a Go
#   toolchain is, the real stack's tests as `make test-real` runs them: its integration subset, then the
#   walkthrough on it (tests/e2e/test_20_real_walkthrough.py), one real control plane at a time, after
#   the real stack's build when its binaries are missing.
REAL_WALKTHROUGH := tests/e2e/test_20_real_walkthrough.py
E2E_PYTEST := $(BIN)/python -m pytest -n 2 --dist loadgroup tests/browser tests/e2e --ignore=$(REAL_WALKTHROUGH)
UNIT_INTEGRATION_PYTEST := $(BIN)/python -m pytest -n 2 tests/unit tests/integration

# The real-stack subset (realcluster/README.md) runs where a Go toolchain is; elsewhere it is skipped, saying so.
GO_TOOLCHAIN := $(shell command -v go || ls /usr/local/go/bin/go 2>/dev/null)
REAL_PYTEST := $(BIN)/python -m pytest -p no:xdist --cluster=real tests/integration/kueue_ray tests/integration/kubesim/test_scenarios.py

test: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
ifneq ($(GO_TOOLCHAIN),)
	$(MAKE) --no-print-directory -j2 --output-sync=target test-browser-e2e test-unit-integration-then-real
else
	$(MAKE) --no-print-directory -j2 --output-sync=target test-browser-e2e test-unit-integration
	@echo "make test: SKIPPED the real-stack suite (no Go toolchain; see realcluster/README.md)"
endif

test-browser-e2e: venv
	$(E2E_PYTEST)

test-unit-integration: venv
	$(UNIT_INTEGRATION_PYTEST)

# The build (when the binaries are missing) only after the tests without an Airflow, so that a cold build
# shares the two cores with the e2e tests alone, as it did when measured (realcluster/README.md, CI).
test-unit-integration-then-real: test-unit-integration
	$(MAKE) --no-print-directory realcluster
	$(REAL_PYTEST)
	$(BIN)/python -m pytest -p no:xdist $(REAL_WALKTHROUGH)

demo: venv
	$(BIN)/python -m devtools.demo

# The same suite with the e2e fault test at full load (CI runs a smaller one).
test-full: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(UNIT_INTEGRATION_PYTEST)
	E2E_FULL=1 $(E2E_PYTEST)
	$(BIN)/python -m pytest -p no:xdist $(REAL_WALKTHROUGH)

# The real control plane's programs (realcluster/go.mod), built into ~/.cache/airflow-kueue-ray/realcluster/.
realcluster:
	PATH="$(PATH):/usr/local/go/bin" realcluster/build.sh

# The integration tests that use only the Kubernetes API, against the real control plane
# (realcluster/README.md), then the walkthrough through Airflow on a real control plane of its own once the
# first has stopped; builds the binaries first when they are missing.
test-real: venv realcluster
	$(REAL_PYTEST)
	$(BIN)/python -m pytest -p no:xdist $(REAL_WALKTHROUGH)

# ruff over everything; mypy over the pure core listed in pyproject.toml's [tool.mypy]
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .run

# Benchmarks (not part of `make test`): quick (< 5 min) and full (every figure of bench/README.md, one run).
bench: venv
	$(BIN)/python -m bench.run --profile quick

bench-full: venv
	$(BIN)/python -m bench.run --profile full --out bench/results/full.json
