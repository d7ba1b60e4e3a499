"""Design document 000 (Context Window Manager, MEM-CTX-01), tested as it states its promises.

Sections cited: "Data Model" (``BuildContextOptions.QueryForMemoryRetrieval``,
``ContextSnapshot.CreatedAt``, ``BuiltContext.BuildTime``), "Events"
(``ContextBuiltEvent``), "Observability" (§7.1 log templates, §7.2 metrics with the
add and build latency histograms). The document's Gherkin scenarios (§10) are in
tests/test_window_gherkin.py.
"""

from __future__ import annotations

import logging
import time

import pytest

from ctxsim.window import BuildOptions, ContextItem, ContextWindow
from ctxsim.window.telemetry import LATENCY_BUCKETS_MS, Histogram


def _window() -> ContextWindow:
    window = ContextWindow(4096, agent_id="billing")
    window.add(ContextItem("You are a careful assistant.", "system_prompt", id="system"))
    window.add(ContextItem("Please fix the failing invoice export.", "user_message", id="ask"))
    window.add(ContextItem("The invoice export writes CSV rows with the customer totals.", "retrieved_document", id="doc-invoice"))
    window.add(ContextItem("Garden planting calendar for the spring tomatoes.", "retrieved_document", id="doc-garden"))
    window.add(ContextItem("Notes on the invoice CSV totals rounding.", "working_memory", id="mem-invoice"))
    return window


def test_query_for_memory_retrieval_selects_relevant_memory():
    window = _window()
    everything = window.build_structured(BuildOptions())
    assert {"doc-invoice", "doc-garden", "mem-invoice"} <= set(everything.included_ids)
    built = window.build_structured(BuildOptions(query_for_memory_retrieval="invoice CSV totals"))
    assert "doc-invoice" in built.included_ids and "mem-invoice" in built.included_ids
    assert "doc-garden" in built.excluded_ids, "memory that shares nothing with the query is left out"
    assert built.included_ids == tuple(i for i in everything.included_ids if i != "doc-garden"), "seed 000's order"


def test_query_for_memory_retrieval_fills_a_tight_budget_with_the_most_relevant_first():
    window = _window()
    tight = window.build_structured(BuildOptions(reserve_for_response=4096 - 60, query_for_memory_retrieval="garden spring"))
    assert "doc-garden" in tight.included_ids and "doc-invoice" not in tight.included_ids


def test_built_context_and_event_carry_the_build_time():
    window = _window()
    seen = []
    window.on("built", seen.append)
    built = window.build_structured()
    assert built.build_time_ms > 0 and seen[0].build_time_ms == built.build_time_ms


def test_snapshot_records_its_creation_time():
    before = time.time()
    snapshot = _window().snapshot()
    assert before <= snapshot.created_at <= time.time()


def test_log_templates_at_the_documents_levels(caplog):
    caplog.set_level(logging.DEBUG, logger="ctxsim.window")
    window = ContextWindow(200, compaction_threshold=50.0, agent_id="a1", default_strategy="remove_oldest")
    for i in range(6):
        window.add(ContextItem("chatter about the garden " * 5, "user_message", id=f"m{i}"))
    window.build(BuildOptions(reserve_for_response=20))
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, "Context window initialized for agent a1, max=200 tokens") in records
    assert any(level == logging.DEBUG and msg.startswith("Added context item m0 type=user_message tokens=") and
               msg.endswith("for agent a1") for level, msg in records)
    assert any(level == logging.WARNING and msg.startswith("Context usage at ") and
               msg.endswith("% for agent a1, triggering compaction") for level, msg in records)
    assert any(level == logging.INFO and msg.startswith("Compacted context for agent a1: strategy=remove_oldest, freed=")
               for level, msg in records)
    assert any(level == logging.DEBUG and msg == "Removed context item m0 reason=compaction for agent a1"
               for level, msg in records)
    assert any(level == logging.DEBUG and msg.startswith("Built context: ") for level, msg in records)


def test_full_window_logs_an_error(caplog):
    caplog.set_level(logging.ERROR, logger="ctxsim.window")
    window = ContextWindow(50, agent_id="a2")
    window.add(ContextItem("x " * 20, "system_prompt", pinned=True, id="sys"))
    with pytest.raises(Exception):
        window.add(ContextItem("y " * 40, "user_message", id="big"))
    assert any(r.getMessage().startswith("Context window full for agent a2: current=") for r in caplog.records)


def test_metrics_have_the_documents_names_and_latency_histograms():
    window = _window()
    window.build()
    metrics = window.metrics()
    assert set(metrics) == {
        "agents.context.items", "agents.context.tokens", "agents.context.usage_percent",
        "agents.context.add_latency_ms", "agents.context.build_latency_ms",
        "agents.context.compaction_total", "agents.context.tokens_freed_total",
    }
    assert metrics["agents.context.items"] == 5 and metrics["agents.context.add_latency_ms"].count == 5
    assert metrics["agents.context.build_latency_ms"].count == 1


def test_histogram_buckets_and_quantiles():
    h = Histogram()
    assert h.quantile(0.95) == 0.0
    for ms in [0.05] * 90 + [7.0] * 9 + [99_999.0]:
        h.observe(ms)
    assert h.count == 100 and h.quantile(0.5) == LATENCY_BUCKETS_MS[0]
    assert h.quantile(0.95) == 10 and h.quantile(1.0) == float("inf")
