# quiclab — the two commands are `make run` and `make test`; everything else is optional.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
QUICLAB := $(BIN)/quiclab
PYTEST_FLAGS ?=

.PHONY: run validate test test-slow test-testbed lint bench docs testbed app setup clean mutation

# setup.py and the DES hot path: `pip install -e` compiles those modules with mypyc
# (a stale build is not used — sim/des/native.py — but then runs at pure-Python speed).
$(STAMP): pyproject.toml setup.py $(wildcard sim/des/*.py)
	@command -v $(PY) >/dev/null || { echo "python3.11 not found"; exit 1; }
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## The main job, the whole loop in a few minutes after the install (~90 s of CPU):
## build the catalog from ../shared, calibrate in sample (rewrites models/fitted bit
## for bit), predict with the analytic engine and the DES, validate against every
## published point and dataset cell, reproduce one seed figure (seed 000 Fig. 9a).
## The long checks are `make validate`.
run: $(STAMP)
	$(QUICLAB) data ingest
	$(QUICLAB) data summary
	$(QUICLAB) calibrate --cv none
	$(QUICLAB) predict --server lsquic --client lsquic
	$(QUICLAB) predict --server lsquic --client lsquic --engine des
	$(QUICLAB) predict --server quiche@2025 --client quiche@2025 --set 'cpu=W-2145 app=perf mtu_bytes=9000'
	$(QUICLAB) validate
	$(QUICLAB) reproduce repro-koenig25-fig9a-mtu-offload

## The long checks (up to an hour on a shared 2-core host): the calibration with
## leave-one-experiment-out cross-validation, every reproduction (DES ones simulate
## whole transfers), and the validation report with the findings table.
validate: $(STAMP)
	$(QUICLAB) data ingest
	$(QUICLAB) calibrate --cv experiments
	$(QUICLAB) validate --reproduce

## The default test suite (what CI runs).
test: $(STAMP)
	$(BIN)/pytest -m "not slow" $(PYTEST_FLAGS)

## The slow tests, and the property-based tests (tests/properties/) with many more examples.
test-slow: $(STAMP)
	QUICLAB_HYPOTHESIS_PROFILE=long $(BIN)/pytest -m "slow or properties" $(PYTEST_FLAGS)

## Lint and type check (CI runs it before the tests). mypy checks the package as it is
## imported (quiclab.sim.scenario, not sim.scenario): .ci/typecheck.py stages that tree.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python .ci/typecheck.py

bench: $(STAMP)
	$(QUICLAB) bench all

## Mutation testing (Cosmic Ray) of the modules in tests/mutation/targets.toml, nice'd,
## resumable (sessions in build/mutation/); report in docs/results/mutation.md.
## MUTATION_ARGS='--module sim/resolve.py --budget-minutes 30' limits a run.
MUTATION_ARGS ?=
mutation: $(STAMP)
	nice -n 10 $(BIN)/python tests/mutation/run.py $(MUTATION_ARGS)

## docs/reference/ regenerated from the code and the catalog's schema (a test fails when
## a page is stale). docs/results/ is this machine's: `quiclab report` after `make run`.
docs: $(STAMP)
	$(BIN)/python -m quiclab.reference

clean:
	rm -rf $(VENV) build *.egg-info

# >>> testbed — this block belongs to testbed/; edit only inside it.
# Builds run as root where Debian packages are missing (CI does); nice'd, 2 jobs.
TESTBED_CLI := $(BIN)/python -m quiclab.testbed testbed

## Build every stack's peer (cached: rebuilds only when a peer's source changes).
testbed: $(STAMP)
	$(TESTBED_CLI) build

## quic-go's peer, needed by the real transfer test in `make test`. A failed build does
## not stop the suite: the transfer test then fails and says the peer is missing.
testbed-quic-go: $(STAMP)
	-$(TESTBED_CLI) build --stacks quic-go

test: testbed-quic-go

## Every testbed test: all stacks' short transfers, topology, hangs (needs root).
test-testbed: testbed
	$(BIN)/pytest tests/testbed -m "testbed or not testbed" $(PYTEST_FLAGS)

.PHONY: testbed-quic-go
# <<< testbed

# >>> app — this block belongs to app/; edit only inside it.
# `make app` starts the what-if explorer; `make browser` gets Debian's Chromium for the
# browser test (tests/app/test_browser.py), which `make test` runs.
CHROMIUM := /usr/bin/chromium
APP_ARGS ?=

## The what-if explorer on localhost; Streamlit options via APP_ARGS='--server.port 8599'.
app: $(STAMP)
	$(QUICLAB) app $(APP_ARGS)

## Debian's chromium, installed with apt-get when it is missing and we are root. If it
## cannot be installed the suite still runs and the browser test says why it is skipped.
browser:
	@if [ -x $(CHROMIUM) ]; then \
	  echo "browser: $(CHROMIUM) present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "browser: installing Debian's chromium for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	     apt-get install -y -qq --no-install-recommends chromium) \
	  || echo "browser: chromium could not be installed; the browser test will be skipped"; \
	else \
	  echo "browser: no $(CHROMIUM) and no root apt-get; the browser test will be skipped"; \
	fi

test: browser

.PHONY: browser
# <<< app
