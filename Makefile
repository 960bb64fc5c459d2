# Two commands on a fresh machine: `make demo` and `make test`.
# Each builds the virtual environment from pyproject.toml when it is missing or stale.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pytest-xdist workers. Many tests wait on subprocesses, daemons and PostgreSQL, so on
# a 2-core machine more workers than cores pay, up to 4: measured 2026-12-03 on a clean
# clone, the parallel pass took 906 s with 4 workers and 956 s with 6 (the cores 97%
# busy). loadgroup is tests/support/scheduling.py's: the modules listed there each run
# on one worker.
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadgroup
# `make test-fast` leaves out the daemon and subprocess waits that extra workers fill,
# so it is CPU-bound and a fourth worker only adds its start-up and contention: measured
# 2026-12-07 at fea59e5, 4 workers took 324 and 358 s (551 and 601 s of CPU), 3 workers
# 286 to 314 s (472 to 519 s of CPU).
TEST_FAST_WORKERS ?= 3
# pytest keeps a test module's rewritten code in __pycache__ only where it may write
# bytecode; where PYTHONDONTWRITEBYTECODE is set, every pytest process (the serial
# pass, each worker) rewrites and compiles the 30,000 lines of tests again: 10.9 s of
# CPU to collect, 5.4 s with the cache (measured 2026-12-03). The serial pass runs
# first and leaves the cache for the workers, and the processes the tests start
# (code locations under tests/support, reliability workers) keep theirs too.
PYTEST = PYTHONDONTWRITEBYTECODE= $(BIN)/pytest
# The tests' files go to tmpfs where the machine has one. Dagster's SQLite run and event
# storage commits, so syncs the disk, for every event a run stores: measured 2026-12-05,
# two reporting tests took 17.5 to 21.7 s with their files under /tmp on this machine's
# disk and 10.7 to 11.1 s under /dev/shm.
TEST_TMP_ROOT ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo /tmp)

.PHONY: demo test test-fast test-polaris polaris-mutations lint bench services system fast-system bytecode clean lock test-restricted

# Every dependency (runtime and dev, every platform) pinned with its hashes, by `make lock`.
LOCK := requirements-dev.lock
# The installers themselves, pinned too: a new pip or uv is a change made on purpose.
PIP_VERSION := 26.3
UV_VERSION := 0.13.9
# Named by the versions, so changing either reinstalls them.
TOOLS := $(BIN)/.tools-pip$(PIP_VERSION)-uv$(UV_VERSION)

$(TOOLS):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==$(PIP_VERSION) uv==$(UV_VERSION)
	touch $@

# uv installs the same requirements from PyPI in a third of pip's time (about 30 s
# against 90 s here, most of it byte-compiling, which pip does too); the venv keeps
# its own pip for anything that asks for one. The lock's pins and hashes, then the
# project itself editable, with nothing unpinned beside it (--no-deps).
$(BIN)/.installed: pyproject.toml $(LOCK) $(TOOLS)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode \
		--require-hashes -r $(LOCK)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $@

# Resolve pyproject.toml's dependencies and the dev extra again, for every platform and
# Python >= 3.11, to their newest allowed versions; commit the result.
lock: $(TOOLS)
	$(BIN)/uv pip compile --quiet --python $(BIN)/python --universal --generate-hashes \
		--extra dev --output-file $(LOCK) pyproject.toml

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

# What the fast tests need of `system`: Azurite and pgbouncer, not the browser or Java.
fast-system:
	bash scripts/install-storage-emulators.sh
	bash scripts/install-pgbouncer.sh

# Two pytest runs: the tests marked serial (they restart PostgreSQL or time
# themselves) one at a time with nothing beside them, then every other test in
# parallel; it prints the last summary line. Both always run; either failing fails.
# The parallel run's temporary directory is short: xdist adds popen-gwN/ to every test's
# path, and an error naming a file under pytest-of-root/pytest-NNN/popen-gwN/ grew past
# the length at which stored errors are abbreviated (tests/test_guard_roots.py).
test: $(BIN)/.installed bytecode system services lint
	@status=0; tmp=$$(mktemp -d $(TEST_TMP_ROOT)/pp.XXXXXX); \
	$(PYTEST) -m serial --basetemp=$$tmp/s || status=$$?; \
	$(PYTEST) $(PYTEST_PARALLEL) --basetemp=$$tmp/p -m "not serial" || status=$$?; \
	if [ $$status -eq 0 ]; then rm -rf $$tmp; else echo "test files kept in $$tmp"; fi; \
	exit $$status

# The edit loop: everything but the tests marked slow (daemons, browser, Spark/Java, the
# operator guide, reliability, and a few whole-process runs: pyproject.toml), in parallel.
# Its cost is CPU: 6 min 55 s on a quiet 2-core machine at 0f81194, and 629 s of CPU
# in its pytest processes (measured 2026-12-06 at 52950be, -n 2 on a shared machine;
# 1,985 tests, 206 of them over 5 s). Taken out since: the wheel build (19 s) and the
# 10,000-task tick (5 s of CPU) are slow; test_test_layout parses the suite once (12 s
# to 3 s of CPU); Dagster's alembic scripts are read once per process (an instance
# 0.35 s to 0.13 s of CPU, each run 0.06 s less; test_dagster_sensor 26 s to 18 s). What
# is left is mostly Dagster runs and pyiceberg tables on moto, 1 to 5 s of CPU each.
test-fast: $(BIN)/.installed bytecode fast-system services
	@tmp=$$(mktemp -d $(TEST_TMP_ROOT)/pp.XXXXXX); \
	$(PYTEST) -n $(TEST_FAST_WORKERS) --dist loadgroup --basetemp=$$tmp/p -m "not slow"; status=$$?; \
	if [ $$status -eq 0 ]; then rm -rf $$tmp; else echo "test files kept in $$tmp"; fi; \
	exit $$status

# The whole suite with the pipeline's side connected as the operator guide's restricted
# role (grant-role's grants and row-level security) wherever the tests reach PostgreSQL
# (tests/support/metastore.py as_pipeline, tests/reliability/conftest.py); the tests
# that create schemas or indexes stay the admin's, as the tables' owner does that.
test-restricted:
	PP_TEST_RESTRICTED_ROLE=1 $(MAKE) test

# The rows we write judged by Polaris releases' own classes, and Polaris 1.4.1's own purge
# beside ours (the oracle): installs them (a no-op once done), then runs those tests alone;
# the run ends with one line per release.
# The releases: tests/polaris/releases.
test-polaris: $(BIN)/.installed services
	bash scripts/install-polaris-classes.sh
	PP_POLARIS_COMPAT_DOC=docs/polaris-compatibility.md $(PYTEST) tests/test_polaris_classes.py \
		tests/test_polaris_oracle.py tests/test_polaris_oracle_faults.py

# Each mutation scripts/polaris-mutations.sh lists, applied to a scratch copy of the tree,
# must turn a Polaris-class test red: one line per mutation.
polaris-mutations: $(BIN)/.installed services
	bash scripts/install-polaris-classes.sh
	bash scripts/polaris-mutations.sh

bench: $(BIN)/.installed bytecode services
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo build *.egg-info .mypy_cache .ruff_cache .pytest_cache
