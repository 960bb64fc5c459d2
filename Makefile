# Two commands on a fresh machine: `make demo` and `make test`.
# Each builds the virtual environment from pyproject.toml when it is missing or stale.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench services system bytecode clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# pip byte-compiles a wheel's modules as it installs them; an editable install does
# not, and where PYTHONDONTWRITEBYTECODE is set nothing ever writes them, so every
# process (each Dagster run among them) would compile the project from source.
bytecode: $(BIN)/.installed
	$(BIN)/python -m compileall -q polaris_pipeline assets sensors resources jobs bench \
		definitions.py celery_definitions.py

demo: $(BIN)/.installed bytecode
	$(BIN)/python demo.py

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

services:
	bash scripts/services.sh

system:
	bash scripts/install-system-packages.sh

test: $(BIN)/.installed bytecode system services lint
	$(BIN)/pytest

bench: $(BIN)/.installed bytecode services
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo build *.egg-info .mypy_cache .ruff_cache .pytest_cache
