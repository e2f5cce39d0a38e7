# Every target sets itself up from a fresh clone: the venv is built from the pinned lock on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: run airflow test test-full test-real realcluster lint demo bench bench-full venv clean

venv: $(STAMP)

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $@

# Knobs (README "make run"): AIRFLOW_PORT, TIME_SCALE, CLUSTER=kubesim|real|kubeconfig, KUBECONFIG, UNPAUSE.
# CLUSTER=real builds the real control plane's programs first when they are missing (realcluster/README.md).
run: venv $(if $(filter real,$(CLUSTER)),realcluster)
	$(BIN)/python -m devtools.run

# The airflow CLI against `make run`'s Airflow, e.g. make airflow ARGS="dags list"
airflow: venv
	@$(BIN)/python -m devtools.cli $(ARGS)

# Two runs: the tests without an Airflow of their own on both cores (each xdist worker starts its own
# kubesim), then the browser and e2e tests in two xdist groups side by side (tests/conftest.py): the
# browser tests and test_00's `make run` starts one after another in one worker, the e2e session's shared
# Airflow in the other. Their Airflows mostly wait on simulated time, so two at once fit on two cores.
E2E_PYTEST := $(BIN)/python -m pytest -n 2 --dist loadgroup tests/browser tests/e2e

# The real-stack subset (realcluster/README.md) runs where a Go toolchain is; elsewhere it is skipped, saying so.
GO_TOOLCHAIN := $(shell command -v go || ls /usr/local/go/bin/go 2>/dev/null)
REAL_PYTEST := $(BIN)/python -m pytest -p no:xdist --cluster=real tests/integration/kueue_ray tests/integration/kubesim/test_scenarios.py

test: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 tests/unit tests/integration
	$(E2E_PYTEST)
	@if [ -n "$(GO_TOOLCHAIN)" ]; then $(MAKE) --no-print-directory test-real; \
	else echo "make test: SKIPPED the real-stack suite (no Go toolchain; see realcluster/README.md)"; fi

demo: venv
	$(BIN)/python -m devtools.demo

# The same suite with the e2e fault test at full load (CI runs a smaller one).
test-full: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 tests/unit tests/integration
	E2E_FULL=1 $(E2E_PYTEST)

# The real control plane's programs (realcluster/go.mod), built into ~/.cache/airflow-kueue-ray/realcluster/.
realcluster:
	PATH="$(PATH):/usr/local/go/bin" realcluster/build.sh

# The integration tests that use only the Kubernetes API, against the real control plane
# (realcluster/README.md); builds the binaries first when they are missing.
test-real: venv realcluster
	$(REAL_PYTEST)

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
