# Two commands on a fresh Linux machine with Python 3.10+:
#   make run   - create .venv, install batchfit, run it on a built-in example
#   make test  - create .venv, install the test extra (CPU torch), run lint and the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/batchfit estimate --model llama-3.1-8b --seq-len 4096 --micro-batch 2 \
		--gpu h100-sxm --gpus-per-node 8 --zero 3 --recompute full

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

# Benchmarks get their own environment: llm-analysis (the peer compared side by side) pins
# an old transformers that must not leak into the test environment.
BENCH := .venv-bench
$(BENCH)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH)
	$(BENCH)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH)/bin/python -m pip install --quiet -e '.[test]' llm-analysis
	touch $@

bench: $(BENCH)/.installed
	$(BENCH)/bin/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) $(BENCH) build dist .pytest_cache .ruff_cache .hypothesis
