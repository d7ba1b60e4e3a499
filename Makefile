# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all demo bench clean

$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/pytest -q -n 2

test-all: $(STAMP)
	$(BIN)/pytest -q -m "slow or not slow"

demo: $(STAMP)
	$(BIN)/ctxsim demo

bench: $(STAMP)
	$(BIN)/python -m ctxsim.bench --out reports/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
