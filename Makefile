# Entry points: `make demo`, `make test` and `make bench`. Each creates .venv when missing and
# installs the package with its test extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test target pytest lit bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: target pytest lit

# Which target (ISA level, vector width, caches) this machine is: the tests run every one it can.
target: $(STAMP)
	$(PY) -c "from tensor_graphs.target import main; main()"

# every core: shards of whole test files at once, then the `serial` tests alone (tests/run_sharded.py)
pytest: $(STAMP)
	$(PY) tests/run_sharded.py

lit: $(STAMP)
	$(VENV)/bin/lit -sv lit_tests

# Every workload, every engine, 1 and 2 threads -> BENCHMARKS.md + benchmarks.png (30+ minutes).
# `make bench BENCH_ARGS=--quick` is a few-minute smoke run (BENCHMARKS.quick.md).
BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(VENV)/bin/tg-bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
