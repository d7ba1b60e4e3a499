"""Fast ``applicable`` tests agree with the plain definitions (the strategy's full plan),
on real contexts of the shipped suite and on random cuts, limits and parameters of them."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import StrategyContext, get_strategy

SCENARIOS = ["chat-10k", "code-heavy", "log-heavy", "tool-dupes", "mild-overflow", "prior-summaries", "transcript-humanevalfix"]


@pytest.fixture(scope="module")
def contexts():
    """Real contexts, then random variations of them: a random run of their units, a
    limit from far under to over their size."""
    rng = random.Random(0)
    real = [build_context(find_scenario(name), seed) for name in SCENARIOS for seed in range(2)]
    out = list(real)
    for state in real:
        for _ in range(6):
            start = rng.randrange(len(state.units))
            units = state.units[start:start + rng.randint(1, len(state.units))]
            cut = state.with_units(units)
            limit = max(1, int(cut.total_tokens * rng.uniform(0.1, 1.3)))
            out.append(replace(cut, limit=limit, min_limit=min(cut.min_limit, limit)))
    return out


def test_compact_keep_recent_applicable_is_its_plan(contexts):
    rng = random.Random(1)
    for state in contexts:
        for _ in range(3):
            strategy = get_strategy("compact_keep_recent", keep_recent=rng.randint(1, 12),
                                    max_summary_tokens=rng.choice((1, 20, 60, 300, 2000, 8000)))
            ctx = StrategyContext(target_tokens=state.limit)
            assert strategy.applicable(state, ctx) == bool(strategy._plan(state, ctx)[0])


def test_clear_tool_results_applicable_is_any_action(contexts):
    rng = random.Random(2)
    for state in contexts:
        for skip in (False, True):
            strategy = get_strategy("clear_tool_results", keep_recent=rng.randint(0, 8))
            ctx = StrategyContext(target_tokens=state.limit, skip_aggressive=skip)
            plain = not state.fits(ctx.target(state)) and bool(list(strategy._actions(state, ctx)))
            assert strategy.applicable(state, ctx) == plain


def test_a_mask_reads_no_more_than_it_needs(monkeypatch):
    """On a large overflowing context, compact_keep_recent answers without pricing its
    summary's floor and clear_tool_results after pricing one placeholder."""
    import ctxsim.strategies.pruning as pruning
    from ctxsim.model import ToolEnvelope

    state = build_context(find_scenario("chat-10k"), 0)
    ctx = StrategyContext(target_tokens=state.limit)
    calls = {"floor": 0, "placeholder": 0}
    floor, placeholder = pruning.summary_floor, ToolEnvelope.placeholder

    def counted_floor(*args, **kwargs):
        calls["floor"] += 1
        return floor(*args, **kwargs)

    def counted_placeholder(self, *args, **kwargs):
        calls["placeholder"] += 1
        return placeholder(self, *args, **kwargs)

    monkeypatch.setattr(pruning, "summary_floor", counted_floor)
    monkeypatch.setattr(ToolEnvelope, "placeholder", counted_placeholder)
    assert get_strategy("compact_keep_recent").applicable(state, ctx)
    assert get_strategy("clear_tool_results").applicable(state, ctx)
    assert calls == {"floor": 0, "placeholder": 1}
