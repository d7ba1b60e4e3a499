"""The contract every strategy keeps, checked by each strategy family's tests."""

from __future__ import annotations

from ctxsim.model import ContextState
from ctxsim.serialize import dumps_state
from ctxsim.strategies import Strategy, StrategyContext, StrategyResult, get_strategy


def apply_with_contract(sid: str, state: ContextState, ctx: StrategyContext | None = None) -> tuple[Strategy, StrategyResult]:
    """Apply strategy ``sid`` to ``state`` and check what every strategy promises:
    the input is not mutated; pinned units come out unchanged; P1 units stay when
    the strategy keeps P1; tokens never grow (recovery handovers excepted);
    ``applicable`` predicts a change, and a change is recorded in the history;
    surviving units keep their order; the same call gives the same state and cost; the
    LLM calls' output limit (their price before they are sent) is at least what they wrote."""
    strategy, ctx = get_strategy(sid), ctx or StrategyContext()
    before = dumps_state(state)
    result = strategy.apply(state, ctx)
    new = result.state
    assert dumps_state(state) == before, "input state mutated"
    for u in state.units:
        if u.pinned:
            assert u.id in new and new.unit(u.id) == u, "pinned unit changed"
        if strategy.keeps_p1 and u.priority == 1:
            assert u.id in new, "P1 unit lost"
    if not strategy.recovery:
        assert new.total_tokens <= state.total_tokens
    assert strategy.applicable(state, ctx) == result.changed
    if result.changed:
        assert new.history == state.history + (sid,)
    survivors = [uid for uid in state.unit_ids if uid in new]
    assert [uid for uid in new.unit_ids if uid in state] == survivors, "chronological order"
    again = strategy.apply(state, ctx)
    assert dumps_state(again.state) == dumps_state(new) and again.cost == result.cost, "not deterministic"
    assert result.cost.llm_output_limit >= result.cost.llm_output_tokens, "output over its limit"
    return strategy, result
