# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all core-check demo demo-report bench validity reports clean

# pip byte-compiles every module it installs (15,000, 66 s on 2 cores) and a process
# imports a third of them: the install skips that, and one import of what ctxsim's
# commands and tests load compiles those (about 20 s). A module left out is compiled
# when first imported, as Python does.
WARM_IMPORTS := ctxsim.lab.cli,ctxsim.lab.train,ctxsim.lab.evaluate,ctxsim.lab.report,torch,stable_baselines3,\
	sb3_contrib,ray.tune,pandas,matplotlib.pyplot,scipy.sparse,langchain_core.messages,tensorboard,pytest,xdist,hypothesis

$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -c constraints.txt -e ".[dev]"
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "import $(WARM_IMPORTS)"
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

# Every committed table made again, in one command, by the commands its report gives:
# the regression baseline, the five default runs and their held-out, cut, small-context
# and probe tables, the three stream runs and their table, the realism and metric
# validity reports, the demo report. A change of what a break keeps (a strategy, the
# summarizer, the contexts) changes them all; on unchanged code `git status` stays clean.
# runs/default and runs/maskable_ppo_stream_warm are trained again (removed first: the
# tables name their runs by these folders); 63 min on 2 cores on a slow day. The reports'
# prose quotes the numbers and is updated by hand.
DEFAULT_EVAL := $(BIN)/ctxsim evaluate --experiment experiments/maskable_ppo_default.yaml
HELDOUT_POLICIES := --policy runs/default --policy oracle --policy best-fixed:maskable_ppo_default --policy greedy \
	--policy seed-chain --policy peer:langchain-trim --policy peer:claude-code --policy peer:anthropic-compact \
	--policy peer:aider --policy peer:adk --policy peer:letta --policy peer:codex --policy peer:opencode \
	--policy peer:anthropic-clear
PROBE_POLICIES := --policy runs/default --policy oracle --policy oracle-without-probes --policy greedy \
	--policy greedy-without-probes
CUTS := --names transcript-marshmallow-cut-family swe-heldout --first-seed 10 --seeds 20
reports: $(STAMP)
	$(BIN)/ctxsim sweep experiments/regression.yaml --out runs/reports/regression --quiet
	cp runs/reports/regression/results.csv reports/baseline.csv
	rm -rf runs/default runs/maskable_ppo_stream_warm
	$(BIN)/ctxsim train experiments/maskable_ppo_default.yaml --seed 0 1 2 3 4 --out runs/default --quiet
	$(DEFAULT_EVAL) --seeds 10 $(HELDOUT_POLICIES) --compare runs/default --by-scenario \
		--out reports/heldout_grounded.csv
	$(DEFAULT_EVAL) --reward seed001 --seeds 10 $(HELDOUT_POLICIES) --compare runs/default --by-scenario \
		--out reports/heldout_seed001.csv
	$(DEFAULT_EVAL) $(CUTS) $(HELDOUT_POLICIES) --compare runs/default --by-scenario --out reports/transcript_cuts.csv
	$(DEFAULT_EVAL) --reward seed001 $(CUTS) $(HELDOUT_POLICIES) --compare runs/default --by-scenario \
		--out reports/transcript_cuts_seed001.csv
	$(BIN)/ctxsim evaluate --env envs/default.yaml --reward grounded --scenarios data/families/swe_corpus_early.yaml \
		--first-seed 200 --seeds 20 --policy runs/default --policy best-fixed:maskable_ppo_default \
		--policy seed-chain --policy peer:langchain-trim --policy greedy --policy oracle --compare runs/default \
		--by-scenario --out reports/small_contexts.csv
	$(DEFAULT_EVAL) --split validation --seeds 10 $(PROBE_POLICIES) --policy best-fixed:maskable_ppo_default \
		--compare runs/default --by-scenario --out reports/probes_worth_validation.csv
	$(DEFAULT_EVAL) --split train --first-seed 200 --seeds 4 $(PROBE_POLICIES) --compare runs/default \
		--by-scenario --out reports/probes_worth_train200.csv
	$(DEFAULT_EVAL) --split train --names swe-train transcript-ctf-katy-cut-family \
		transcript-missing-colon-cut-family --first-seed 200 --seeds 10 --policy runs/default \
		--policy peer:langchain-trim --policy only:remove_low_priority --policy oracle --policy oracle-without-probes \
		--policy greedy --policy greedy-without-probes --compare runs/default --by-scenario \
		--out reports/probes_worth_traincuts.csv
	$(BIN)/ctxsim train experiments/maskable_ppo_stream_warm.yaml --seed 0 1 2 --out runs/maskable_ppo_stream_warm --quiet
	$(BIN)/ctxsim evaluate --env envs/stream.yaml --policy runs/maskable_ppo_stream_warm --policy seed-chain \
		--policy best-fixed:maskable_ppo_stream_warm --policy greedy --policy oracle --policy rollout:seed-chain \
		--policy rollout:best-fixed:maskable_ppo_stream_warm --policy peer:anthropic-clear --policy peer:opencode \
		--policy peer:letta --policy peer:codex --policy peer:langchain-trim --policy peer:claude-code \
		--policy peer:anthropic-compact --policy peer:aider --policy peer:adk --names gpt4-6000 tool-dupes --seeds 5 \
		--out reports/stream_eval.csv --compare runs/maskable_ppo_stream_warm --markdown runs/reports/stream.md
	$(BIN)/ctxsim realism --rank
	$(BIN)/python -m ctxsim.lab.validity --out reports/metric_validity.md
	$(BIN)/ctxsim demo --out reports/demo --quiet

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
