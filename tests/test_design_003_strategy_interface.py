"""Design document 003 (Context Strategy Interface), tested as it states its promises.

Sections cited: "IContextStrategy" (id, display name, ``Priority``, ``MaxTokens``),
"StrategyPriority" (the 100/80/60/40/20 scale), "ContextBudget" (required and
excluded strategies; exclusion takes precedence), "Strategy registry/factory"
(unknown ids rejected) and "ContextStrategyBase.TruncateToMaxTokens"
(paragraph-boundary truncation).
"""

from __future__ import annotations

import pytest

from ctxsim.lab.cli import main
from ctxsim.errors import StrategyError
from ctxsim.model import ContextState, ContextUnit
from ctxsim.strategies import (
    ContextBudget,
    Outcome,
    Strategy,
    StrategyContext,
    StrategyPriority,
    describe_strategies,
    get_strategy,
    list_strategies,
    strategy_class,
)
from ctxsim.strategies.base import RANK_SUMMARIZE
from ctxsim.strategies.common import summary_unit, truncate_paragraphs
from ctxsim.tokens import count_tokens


def _state(n: int = 8, words: int = 60) -> ContextState:
    units = [
        ContextUnit(f"u{i}", "message", " ".join(f"word{i}x{j}" for j in range(words)), role="assistant", turn=i)
        for i in range(n)
    ]
    return ContextState(units=tuple(units), limit=200, min_limit=10, task="the task")


# ---- IContextStrategy: id, display name, priority, max tokens ---------------------------------
def test_every_strategy_states_id_name_priority_and_max_tokens():
    levels = {int(p) for p in StrategyPriority}
    for row in describe_strategies():
        cls = strategy_class(row["id"])
        assert row["name"] == cls.display_name and row["name"]
        assert row["priority"] == cls.priority and 0 <= row["priority"] <= 100
        assert row["priority"] in levels, "built-in strategies use the seed's levels"
        assert row["max_tokens"] is None or row["max_tokens"] > 0


def test_priority_levels_are_the_documents_scale():
    assert [int(p) for p in StrategyPriority] == [100, 80, 60, 40, 20]


def test_gentler_strategies_have_higher_priority():
    """Default priorities follow the ladder: pruning is critical, recovery optional."""
    assert strategy_class("dedupe_tool_results").priority == StrategyPriority.CRITICAL
    assert strategy_class("summarize_old").priority == StrategyPriority.MEDIUM
    assert strategy_class("fresh_start").priority == StrategyPriority.OPTIONAL


def test_max_tokens_follows_the_parameters():
    assert get_strategy("fresh_start", handover_tokens=300).max_tokens == 300
    small = get_strategy("compact_keep_recent", max_summary_tokens=100).max_tokens
    assert 100 < small < get_strategy("compact_keep_recent").max_tokens


def test_a_strategy_that_writes_more_than_its_max_tokens_is_a_bug():
    """"Respect MaxTokens to prevent context overflow": the template checks it."""

    class Verbose(Strategy):
        id = "verbose_for_test"
        display_name = "Verbose"
        rank = RANK_SUMMARIZE

        @property
        def max_tokens(self) -> int:
            return 10

        def run(self, state, ctx):
            summary = summary_unit(state.units[:4], "word " * 50)
            return Outcome(state.with_units([summary] + list(state.units[4:])))

    with pytest.raises(StrategyError, match="verbose_for_test.*max_tokens 10"):
        Verbose().apply(_state())


def test_fresh_start_handover_stays_within_its_max_tokens():
    strategy = get_strategy("fresh_start", handover_tokens=100)
    result = strategy.apply(_state(words=200))
    (handover,) = [u for u in result.state.units if u.type == "summary"]
    assert count_tokens(handover.content) <= strategy.max_tokens


def test_cli_strategies_shows_priority_and_max_tokens(capsys):
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "priority" in out and "max tokens" in out
    line = next(ln for ln in out.splitlines() if "fresh_start" in ln)
    assert " 20 " in line and " 500 " in line


# ---- registry / factory ------------------------------------------------------------------
def test_registry_rejects_unknown_ids_naming_the_valid_ones():
    with pytest.raises(StrategyError, match="unknown strategy 'nope'; valid ids: .*summarize_old"):
        get_strategy("nope")


def test_registry_lists_every_strategy_once_in_ladder_order():
    ids = list_strategies()
    assert len(ids) == len(set(ids))
    ranks = [strategy_class(sid).rank for sid in ids]
    assert ranks == sorted(ranks)


# ---- ContextBudget ---------------------------------------------------------------------
def test_budget_required_and_excluded():
    budget = ContextBudget(max_tokens=8000, required=("summarize_old",), excluded=("drop",))
    assert budget.is_required("summarize_old") and not budget.is_required("drop")
    assert budget.is_excluded("drop") and not budget.should_execute("drop")
    assert budget.should_execute("summarize_old")


def test_an_excluded_strategy_does_not_run():
    with pytest.raises(StrategyError, match="excluded by the budget"):
        get_strategy("summarize_old").apply(_state(), StrategyContext(budget=ContextBudget(excluded=("summarize_old",))))


def test_exclusion_takes_precedence_over_requirement_in_hybrid():
    state = _state()
    budget = ContextBudget(required=("discard_low_rel",), excluded=("discard_low_rel",))
    result = get_strategy("hybrid").apply(state, StrategyContext(budget=budget))
    assert "discard_low_rel" not in result.note


# ---- TruncateToMaxTokens ---------------------------------------------------------------------
def test_truncation_keeps_whole_paragraphs():
    paragraphs = [f"Paragraph {i}: " + "alpha beta gamma delta. " * 5 for i in range(6)]
    text = "\n\n".join(paragraphs)
    cut = truncate_paragraphs(text, 80)
    assert count_tokens(cut) <= 80
    assert cut.split("\n\n") == paragraphs[: len(cut.split("\n\n"))]
    assert truncate_paragraphs(text, 10_000) == text


def test_the_budgets_max_tokens_caps_every_strategys_target():
    state = _state(n=12)
    ctx = StrategyContext(budget=ContextBudget(max_tokens=300))
    assert ctx.target(state) == 200, "the state's limit is lower"
    assert StrategyContext(target_tokens=900, budget=ContextBudget(max_tokens=300)).target(state) == 300
    after = get_strategy("remove_oldest").apply(state, StrategyContext(target_tokens=900, budget=ContextBudget(max_tokens=300)))
    assert after.tokens_after <= 300 < get_strategy("remove_oldest").apply(state, StrategyContext(target_tokens=900)).tokens_after



@pytest.mark.parametrize(("field", "value"), [
    ("target_tokens", "100"), ("target_tokens", -5), ("target_tokens", 2.5), ("target_tokens", True), ("query", 5),
    ("budget", "x"), ("skip_aggressive", "no"), ("embedder_id", None), ("summarizer_options", [1]),
])
def test_a_strategy_context_field_of_another_type_is_refused_naming_it(field, value):
    """Design 003's context: a target of text failed inside each strategy (TypeError), a
    query of a number inside the summarizers (AttributeError), a skip_aggressive of "no"
    read as True; each is refused when the context is made, naming the field."""
    from ctxsim.errors import StrategyError

    with pytest.raises(StrategyError) as err:
        StrategyContext(**{field: value})
    assert err.value.key == field and f"StrategyContext.{field} must be" in str(err.value)
    assert StrategyContext(target_tokens=0).target_tokens == 0  # an empty target is a target
    import numpy as np

    assert type(StrategyContext(target_tokens=np.int64(50)).target_tokens) is int  # a numpy target is the plain int
