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

# pytest exits 5 when it collects no test: reported, not a failure (make itself would
# turn it into exit 2, so the mapping happens here). Every other failure passes through.
test: $(STAMP)
	@$(BIN)/pytest -q -n 2; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5)"; exit 0; fi; exit $$rc

test-all: $(STAMP)
	$(BIN)/pytest -q -m "slow or not slow"

demo: $(STAMP)
	$(BIN)/ctxsim demo

bench: $(STAMP)
	$(BIN)/python -m ctxsim.bench --out reports/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
