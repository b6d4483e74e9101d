# Two entry points: `make demo` and `make test`. Each creates .venv when missing and
# installs the package with its test extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test pytest lit bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: pytest lit

pytest: $(STAMP)
	$(PY) -m pytest -q tests

lit: $(STAMP)
	$(VENV)/bin/lit -sv lit_tests

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) benchmarks/mlp.py
	$(PY) benchmarks/gpt2.py
	$(PY) benchmarks/decode.py

clean:
	rm -rf $(VENV) build *.egg-info
