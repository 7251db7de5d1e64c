# gpufleet — two commands for a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages the tests need: real Prometheus and VictoriaMetrics for the collectors, the real
# Alertmanager for alerts/, headless Chromium and its driver for the dashboard's browser test.
DEBIAN_PACKAGES := prometheus prometheus-alertmanager victoria-metrics chromium chromium-driver
# The suite waits on real servers and processes much of the time, so it runs on two pytest-xdist
# workers; `worksteal` hands each worker a contiguous half (module-scoped servers start once) and
# lets an idle worker take over the rest of the other's queue: see README.
PYTEST_ARGS ?= -n 2 --dist worksteal

.PHONY: help demo test unit lint typecheck importlint bench system-deps clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(STAMP): pyproject.toml
	@echo ">> creating $(VENV) and installing gpufleet with its dev tools"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip
	@$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

system-deps:  ## install the Debian packages the tests use, when missing
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo ">> installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: $(STAMP)  ## run the whole product on a simulated fleet (gpufleet run, embedded)
	$(BIN)/gpufleet run --embedded

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)  ## mypy (strict) over the whole tree, tests and benchmarks included
	$(BIN)/mypy errors observer detectors remediations evaluation simulator alerts dashboards gpufleet metering \
	  tests bench

importlint: $(STAMP)  ## layer and adapter contracts
	$(BIN)/lint-imports

unit: $(STAMP) system-deps  ## the test suite only
	$(BIN)/pytest -q $(PYTEST_ARGS)

test: $(STAMP) system-deps lint typecheck importlint  ## everything CI runs
	$(BIN)/pytest -q $(PYTEST_ARGS)

bench: $(STAMP) system-deps  ## benchmarks (slow; figures go to docs/performance.md)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
