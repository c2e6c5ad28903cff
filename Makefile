# Everything the tests, the demo and the benchmarks need is installed by these targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python

.PHONY: install system-deps lint-imports test test-fast demo bench executor-zip clean

$(BIN)/dblog: pyproject.toml
	$(MAKE) system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip uv
	@# the Spark provider pulls pyspark-client 4.2, which shares pyspark's files (pyspark 4.3 has all of them): left
	@# out of the resolution, so that pyspark's sdist is built once, not again by a reinstall (a minute here)
	$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode --excludes <(echo pyspark-client) \
		-e '.[airflow,openlineage,sqlserver,dev,bench]'
	@# bytecode up front: every Spark Python worker imports pyspark/pyarrow, and PYTHONDONTWRITEBYTECODE
	@# (set in some environments) would make each one compile them from source again
	$(BIN)/python -m compileall -q -j 0 airflow_provider_dblog dags
	touch $@

install: $(BIN)/dblog

# mariadbd (for the private test/demo server) and Java 17 (for Spark), from Debian, only if missing.
system-deps:
	@bash scripts/system-deps.sh

# the house's import contracts (pyproject.toml [tool.importlinter]) first: an upward import fails the build
lint-imports: install
	$(BIN)/lint-imports --no-cache

test: lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=30

test-fast: lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

demo: install
	$(BIN)/python scripts/demo.py

bench: install
	$(BIN)/python benchmarks/run.py

# the package for Spark executors without an install (--py-files / spark.submit.pyFiles; docs/deploy.md)
executor-zip: install
	$(BIN)/dblog executor-zip dist/dblog-executor.zip

clean:
	rm -rf $(VENV) build *.egg-info .demo
