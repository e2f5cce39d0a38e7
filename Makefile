# Every target sets itself up from a fresh clone: the venv is built from the pinned lock on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: run airflow test test-browser-e2e test-full test-real realcluster lint demo bench bench-full venv clean

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

# Two runs: the tests without an Airflow of their own on both cores (each xdist worker starts its own
# kubesim), then the browser and e2e tests in two xdist groups side by side (tests/conftest.py): the
# browser tests and test_00's `make run` starts one after another in one worker, the e2e session's shared
# Airflow in the other. Their Airflows mostly wait on simulated time, so two at once fit on two cores.
# The walkthrough on the real stack (tests/e2e/test_20_real_walkthrough.py) runs in test-real instead,
# after the integration subset: one real control plane at a time.
REAL_WALKTHROUGH := tests/e2e/test_20_real_walkthrough.py
E2E_PYTEST := $(BIN)/python -m pytest -n 2 --dist loadgroup tests/browser tests/e2e --ignore=$(REAL_WALKTHROUGH)

# The real-stack subset (realcluster/README.md) runs where a Go toolchain is; elsewhere it is skipped, saying so.
GO_TOOLCHAIN := $(shell command -v go || ls /usr/local/go/bin/go 2>/dev/null)
REAL_PYTEST := $(BIN)/python -m pytest -p no:xdist --cluster=real tests/integration/kueue_ray tests/integration/kubesim/test_scenarios.py

# Where a Go toolchain is, the browser and e2e tests and `make test-real` (the real stack's build when its
# binaries are missing, then its tests) run side by side: the e2e run leaves about 40% of two cores idle
# while its Airflows wait on simulated time and their loops: a warm .ci/run took 28 min instead of 38
# (2026-12-05; a cold one overlaps the 9-minute Go build too). Each side's output is printed whole when it
# ends (realcluster/README.md, CI). The unit and integration tests stay first and alone: beside the e2e
# tests from the start (18.5-22.5 min in all) a test failed under the load in two runs of eight, the
# second time after the first one's two causes were fixed (realcluster/README.md).
test: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 tests/unit tests/integration
ifneq ($(GO_TOOLCHAIN),)
	$(MAKE) --no-print-directory -j2 --output-sync=target test-browser-e2e test-real
else
	$(E2E_PYTEST)
	@echo "make test: SKIPPED the real-stack suite (no Go toolchain; see realcluster/README.md)"
endif

test-browser-e2e: venv
	$(E2E_PYTEST)

demo: venv
	$(BIN)/python -m devtools.demo

# The same suite with the e2e fault test at full load (CI runs a smaller one).
test-full: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 tests/unit tests/integration
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
