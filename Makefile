# gpufleet — two commands for a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages the tests need: real Prometheus and VictoriaMetrics for the collectors, the real
# Alertmanager for alerts/, headless Chromium and its driver for the dashboard's browser test,
# openssl for the TLS tests' certificates and the simulated API server's (kubectl sends credentials
# over TLS only), buildah and mmdebstrap to build the image for real.
DEBIAN_PACKAGES := prometheus prometheus-alertmanager victoria-metrics chromium chromium-driver \
  openssl buildah mmdebstrap
# The suite waits on real servers and processes much of the time, so it runs on two pytest-xdist
# workers; `worksteal` hands each worker a contiguous half (module-scoped servers start once) and
# lets an idle worker take over the rest of the other's queue: see README.
PYTEST_ARGS ?= -n 2 --dist worksteal

# The image: `make image` builds the Dockerfile with buildah (no Docker daemon needed) over a
# Debian base made by mmdebstrap from Debian's repositories (no registry needed). The base's
# tarball is cached outside the repo, so only the first build pays for it (docs/performance.md).
IMAGE ?= localhost/gpufleet:dev
DEBIAN_SUITE ?= bookworm
IMAGE_CACHE ?= $(HOME)/.cache/gpufleet
BASE_TAR := $(IMAGE_CACHE)/debian-$(DEBIAN_SUITE)-python3.tar
BASE_IMAGE := localhost/gpufleet-base:$(DEBIAN_SUITE)
# The build's RUN steps trust the host's CA bundle (a TLS-intercepting proxy's CA, if any): it is
# mounted for the build only and handed to pip as PIP_CERT; the image does not keep it.
BUILD_CA ?= $(firstword $(wildcard $(SSL_CERT_FILE) /etc/ssl/certs/ca-certificates.crt))
export STORAGE_DRIVER ?= vfs
export BUILDAH_ISOLATION ?= chroot

.PHONY: help demo test unit lint typecheck importlint bench system-deps clean image constraints

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

# Every package at the version constraints.txt pins (the image installs the same pins), so a test
# run and the shipped image see the same scikit-learn and numpy whatever PyPI has newest today.
$(STAMP): pyproject.toml constraints.txt
	@echo ">> creating $(VENV) and installing gpufleet with its dev tools (pinned: constraints.txt)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip
	@$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# Bumping the pins: a fresh throwaway venv of the current pyproject, unconstrained (the newest
# versions its bounds allow), frozen into constraints.txt with its header kept. Then run the tests.
CONSTRAINTS_VENV := build/constraints-venv
constraints:  ## re-pin constraints.txt from a fresh venv of pyproject.toml (then `make test`)
	rm -rf $(CONSTRAINTS_VENV) && $(PYTHON) -m venv $(CONSTRAINTS_VENV)
	$(CONSTRAINTS_VENV)/bin/pip install -q --upgrade pip
	$(CONSTRAINTS_VENV)/bin/pip install -q -e '.[dev]'
	{ grep '^#' constraints.txt; $(CONSTRAINTS_VENV)/bin/pip freeze --exclude-editable \
	  | grep -v '^#' | grep -vi '^gpufleet=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf $(CONSTRAINTS_VENV)

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
	$(BIN)/mypy errors database observer detectors remediations kube backtesting lab simulator alerts dashboards gpufleet metering \
	  harness tests bench

importlint: $(STAMP)  ## layer and adapter contracts
	$(BIN)/lint-imports

unit: $(STAMP) system-deps  ## the test suite only
	$(BIN)/pytest -q $(PYTEST_ARGS)

test: $(STAMP) system-deps lint typecheck importlint  ## everything CI runs
	$(BIN)/pytest -q $(PYTEST_ARGS)

bench: $(STAMP) system-deps  ## benchmarks (slow; figures go to docs/performance.md)
	$(BIN)/python -m bench

$(BASE_TAR):
	@mkdir -p $(IMAGE_CACHE)
	mmdebstrap --variant=minbase --format=tar --include=python3,python3-venv,ca-certificates \
	  $(DEBIAN_SUITE) $@.part && mv $@.part $@

image: system-deps $(BASE_TAR)  ## build the image with buildah over a local Debian base (IMAGE=...)
	@buildah inspect --type image $(BASE_IMAGE) >/dev/null 2>&1 || { \
	  c=$$(buildah from scratch) && buildah add $$c $(BASE_TAR) / >/dev/null \
	  && buildah commit -q $$c $(BASE_IMAGE) >/dev/null && buildah rm $$c >/dev/null; }
	buildah bud --isolation chroot --layers --build-arg BASE=$(BASE_IMAGE) \
	  $(if $(BUILD_CA),--volume $(BUILD_CA):/run/build-ca.crt:ro --build-arg PIP_CERT=/run/build-ca.crt) \
	  -t $(IMAGE) .

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
