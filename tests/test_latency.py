"""The latency model's prices: after a step (``ms``) and before its LLM calls are sent
(``bound_ms``, ``local_ms``), and the output limits the summarizing strategies record."""

from __future__ import annotations

import pytest

from ctxsim.latency import Cost, LatencyModel
from ctxsim.lab.contexts import build_context
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.strategies.ladder import externalize_span


def test_a_summary_call_is_limited_by_what_it_wrote_and_the_budget_it_left():
    call = Cost.summary(2000, 240, unused_budget=60)
    assert (call.llm_calls, call.llm_input_tokens, call.llm_output_tokens, call.llm_output_limit) == (1, 2000, 240, 300)
    assert Cost.summary(2000, 240).llm_output_limit == 240  # no budget stated: what it wrote
    assert Cost.summary(2000, 240, unused_budget=-5).llm_output_limit == 240  # a kept sentence overran it
    both = call + Cost.summary(1000, 100, unused_budget=0) + Cost(units_touched=4)
    assert (both.llm_calls, both.llm_output_tokens, both.llm_output_limit, both.units_touched) == (2, 340, 400, 4)


def test_the_price_before_the_calls_writes_each_call_to_its_limit():
    model = LatencyModel()
    cost = Cost.summary(2000, 240, unused_budget=60) + Cost(embedded_units=10, units_touched=20, artifact_writes=1)
    assert model.ms(cost) == pytest.approx(150 + 120 + 144 + 10 + 1 + 5)
    assert model.bound_ms(cost) == pytest.approx(model.ms(cost) + 0.06 * 600)
    assert model.local_ms(cost) == pytest.approx(10 + 1 + 5)  # no call: what is done before one is sent
    without = Cost(embedded_units=10, units_touched=20)
    assert model.bound_ms(without) == model.ms(without) == model.local_ms(without)
    assert LatencyModel(llm_output_ms_per_1k=0).bound_ms(cost) == LatencyModel(llm_output_ms_per_1k=0).ms(cost)


@pytest.fixture(scope="module")
def overflowing(scenario_suite):
    by_name = {s.name: s for s in scenario_suite}
    return [build_context(by_name[name], seed) for name in ("plan-heavy", "log-heavy", "severe-overflow") for seed in (0, 1)]


@pytest.mark.parametrize("sid", ["summarize_old", "externalize", "hybrid", "fresh_start"])
def test_the_summarizing_strategies_record_their_budget_as_the_limit(sid, overflowing):
    """Each call's limit is what it wrote plus the budget it left: the price before the
    call is at least the price after it and at most the budget's worth more."""
    model, called = LatencyModel(), 0
    for state in overflowing:
        result = get_strategy(sid).apply(state, StrategyContext())
        cost = result.cost
        assert cost.llm_output_limit >= cost.llm_output_tokens
        assert model.ms(cost) <= model.bound_ms(cost)
        called += cost.llm_calls > 0 and cost.llm_output_limit > cost.llm_output_tokens
    assert called >= 1  # some summary came in under its budget, so the limit is not what it wrote


def test_externalize_prices_a_pointer_summary_at_its_summary_tokens(overflowing):
    strategy = get_strategy("externalize")
    spans = next(strategy.spans(s) for s in overflowing if strategy.spans(s))
    _, _, cost = externalize_span(spans[0], StrategyContext(), 100)
    assert cost.llm_calls == 1 and cost.llm_output_tokens <= 100 and cost.llm_output_limit == 100
