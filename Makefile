# Every target sets itself up from a fresh clone: the venv is built from the pinned lock on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum requirements.txt | cut -c1-12)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: run airflow test test-checked-e2e test-unit-integration test-browser-e2e test-full test-real realcluster lint demo bench bench-full venv clean

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

# The tests without an Airflow of their own (each xdist worker starts its own kubesim) at -n 6: they mostly
# wait on simulated time and sleeps (1.2 of two cores busy at -n 6; 4 min 20 s against 6 min 54 s at -n 2,
# 2026-12-06), with work stealing: its tail is a few 20-60 s tests that `--dist load` had queued behind
# others (3 min 20-30 s against 3 min 48-51 s alone, two runs each, 2026-12-06 afternoon; the
# integration tests first instead took 6 min 18 s). The browser and e2e tests in four xdist groups, a
# worker each (tests/conftest.py): the browser tests, test_00's `make run` starts, and the e2e modules on
# two shared Airflows. The walkthrough on the real stack (tests/e2e/test_20_real_walkthrough.py) runs in
# test-real instead, after the integration subset: one real control plane at a time.
REAL_WALKTHROUGH := tests/e2e/test_20_real_walkthrough.py
UNIT_PYTEST := $(BIN)/python -m pytest -n 6 --dist worksteal tests/unit tests/integration
# The e2e tests start `make run` and README commands as a user would, not as sub-makes of this one: with
# its flags (-j -Otarget) `make run` printed nothing until it ended.
E2E_PYTEST := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $(BIN)/python -m pytest -n 4 --dist loadgroup tests/browser tests/e2e --ignore=$(REAL_WALKTHROUGH)

# The real-stack subset (realcluster/README.md) runs where a Go toolchain is; elsewhere it is skipped, saying so.
GO_TOOLCHAIN := $(shell command -v go || ls /usr/local/go/bin/go 2>/dev/null)
REAL_PYTEST := $(BIN)/python -m pytest -p no:xdist --cluster=real tests/integration/kueue_ray tests/integration/kubesim/test_scenarios.py

# Sides that run from the start, each one's output printed whole when it ends: ruff and mypy; the unit and
# integration tests; once both have passed, the browser and e2e tests; and, where a Go toolchain is,
# `make test-real` (the real stack's build when its binaries are missing, then its tests). Every side
# mostly waits (realcluster/README.md, CI).
test: venv
	$(MAKE) --no-print-directory -j4 --output-sync=target test-checked-e2e $(if $(GO_TOOLCHAIN),test-real)
ifeq ($(GO_TOOLCHAIN),)
	@echo "make test: SKIPPED the real-stack suite (no Go toolchain; see realcluster/README.md)"
endif

test-checked-e2e: lint test-unit-integration
	$(E2E_PYTEST)

test-unit-integration: venv
	$(UNIT_PYTEST)

test-browser-e2e: venv
	$(E2E_PYTEST)

demo: venv
	$(BIN)/python -m devtools.demo

# The same suite with the e2e fault test at full load (CI runs a smaller one).
test-full: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(UNIT_PYTEST)
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
