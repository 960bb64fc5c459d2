# Two commands on a fresh machine: `make demo` and `make test`.
# Each builds the virtual environment from pyproject.toml when it is missing or stale.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench services system clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python demo.py

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

services:
	bash scripts/services.sh

system:
	bash scripts/install-system-packages.sh

test: $(BIN)/.installed system services lint
	$(BIN)/pytest

bench: $(BIN)/.installed services
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo build *.egg-info .mypy_cache .ruff_cache .pytest_cache
