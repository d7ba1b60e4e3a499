# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all core-check demo demo-report bench validity clean

$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# pytest exits 5 when it collects no test: reported, not a failure (make itself would
# turn it into exit 2, so the mapping happens here). Every other failure passes through.
# The run writes bytecode (__pycache__, ignored by git) even where the environment sets
# PYTHONDONTWRITEBYTECODE: otherwise each pytest worker rewrites every test module and
# each subprocess compiles ctxsim again (collecting took 30 s per worker, 11 s with it).
test: $(STAMP)
	@PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -n 2; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5)"; exit 0; fi; exit $$rc

test-all: $(STAMP)
	$(BIN)/pytest -q -m "slow or not slow"

# The core install alone: a fresh venv with `pip install .` (no extras) runs an exported
# policy and a ContextWindow, and has nothing of the extras `lab` and `train` (a few minutes).
core-check: $(STAMP)
	$(BIN)/pytest -q -p no:xdist -m slow tests/test_numpy_only.py -k runtime_only_install

# `make demo` writes into runs/demo/ (ignored by git: a fresh clone stays clean);
# `make demo-report` regenerates the committed reports/demo/ on purpose.
demo: $(STAMP)
	$(BIN)/ctxsim demo --out runs/demo

demo-report: $(STAMP)
	$(BIN)/ctxsim demo --out reports/demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks --out reports/benchmarks.md

# Drop curves, correlations, rankings and the adaptivity gap of the old and new coherence.
validity: $(STAMP)
	$(BIN)/python -m ctxsim.lab.validity --out reports/metric_validity.md

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
