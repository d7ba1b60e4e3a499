"""The targets the benchmark rows answer to: the design documents' budgets (ms)
and the speed targets, as ratios to one tiktoken pass over the same text (or ms, steps/s)."""

from __future__ import annotations

#: targets from the seeds (ms unless stated)
CHAIN_BUDGET_MS, CHAIN_AIM_MS = 2000.0, 100.0  # design 001: breaking, full chain, 50 units
SUMMARY_BUDGET_MS = 500.0  # design 001: summarization of 2,000 tokens
TOKEN_BUDGET_MS = 5.0  # design 001: token estimation per call, with caching
ADD_P95_MS, BUILD_P95_MS = 10.0, 200.0  # design 000
COMPACTION_BUDGET_MS = 5000.0  # design 004: 100 messages
DECIDE_BUDGET_MS = 5.0
DECIDE_UNITS = 50  # the context size of the decide target
#: speed targets, as ratios to one tiktoken pass over the same text (or ms, steps/s)
POOL_RATIO_TARGET = 30.0  # pool build work per context
DECIDE_COLD_MS, DECIDE_WARM_MS = 1.0, 0.2  # decide on a new / a seen 50-unit context (cold: or <= 1x tiktoken)
SUMMARY_RATIO_TARGET = 3.0  # the extractive summarizer on 2,000 tokens, cold
SUMMARY_COLD_INPUTS = 25  # new inputs the cold summarizer row times, each against its own encode
ENV_FRESH_STEPS_S = 150.0  # live env steps/s on contexts never seen
#: contexts decided (untimed) before the cold decide rows: the process's word tables
#: warm up as in a running agent; each timed context is still new
DECIDE_WARMUP_CONTEXTS = 20
#: new contexts the cold 50-unit decide row times (each once)
DECIDE_COLD_CONTEXTS = 40
#: the warm 50-unit decide row: blocks of calls on one seen context (the median of the blocks' medians)
DECIDE_WARM_BLOCKS, DECIDE_WARM_CALLS = 9, 200
TRAIN_RATIO_TARGET = 1.5
SOAK_RSS_MB = 50.0
COHERENCE_RATIO_TARGET = 2.0  # recall, warm, vs one tiktoken pass over the context
