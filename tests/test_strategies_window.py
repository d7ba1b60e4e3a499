"""Seed 000's compaction strategies: remove_oldest, remove_low_priority, summarize, selective."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxsim.errors import StrategyError
from strategy_contract import apply_with_contract

from ctxsim.lab.contexts import build_context
from ctxsim.model import ContextState, ContextUnit
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.strategies.common import relevance_scores
from ctxsim.strategies.window_compaction import MIN_SUMMARY_TOKENS, summary_overhead

WINDOW_IDS = ("remove_oldest", "remove_low_priority", "summarize", "selective")
#: strategies that only remove units, in the order they remove them
REMOVAL_IDS = ("remove_oldest", "remove_low_priority", "selective")

VOCAB = (
    "deploy database schema migration rollback index query latency cache budget invoice meeting "
    "calendar travel recipe garden weather football concert novel painting lecture exam"
).split()
TASK = "Finish the database schema migration and plan the rollback."


def text(seed: int, words: int) -> str:
    """Deterministic prose of ``words`` words, split in sentences of eight words."""
    out = []
    for i in range(words):
        out.append(VOCAB[(seed * 7 + i * (seed % 5 + 1)) % len(VOCAB)])
        if i % 8 == 7:
            out[-1] += "."
    return f"Note {seed}: " + " ".join(out) + "."


def unit(i: int, *, priority: int = 2, pinned: bool = False, words: int = 40, content: str | None = None) -> ContextUnit:
    return ContextUnit(
        id=f"u{i}",
        type="message",
        role="user" if i % 2 == 0 else "assistant",
        content=content or text(i, words),
        turn=i,
        timestamp=float(i),
        priority=priority,
        pinned=pinned,
    )


def state_of(units, *, limit: int, task: str = TASK) -> ContextState:
    return ContextState(units=tuple(units), limit=limit, min_limit=10, task=task)


@st.composite
def states(draw) -> ContextState:
    """Random contexts of 1-14 units (mixed priorities, some pinned), 40-130 % of the limit."""
    n = draw(st.integers(1, 14))
    units = [
        unit(
            i,
            priority=draw(st.sampled_from((1, 2, 3))),
            pinned=draw(st.booleans().map(lambda b: b and i % 4 == 0)),
            words=draw(st.integers(3, 120)),
        )
        for i in range(n)
    ]
    total = state_of(units, limit=10_000).total_tokens
    return state_of(units, limit=max(10, int(total / draw(st.floats(0.4, 1.3)))))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def removed_ids(before: ContextState, after: ContextState) -> list[str]:
    return [u.id for u in before.units if u.id not in after]


# ---- the contract, on random states ----------------------------------------------------------


def check_contract(sid: str, state: ContextState) -> None:
    strategy, result = apply_with_contract(sid, state)
    for u in state.units:
        if strategy.keeps_p1 and u.priority == 1:
            assert u.priority == result.state.unit(u.id).priority


@pytest.mark.parametrize("sid", WINDOW_IDS)
@SETTINGS
@given(state=states())
def test_contract(sid, state):
    check_contract(sid, state)


@pytest.mark.parametrize("scenario", ("pinned-instructions", "prior-summaries", "mostly-p1", "transcript-marshmallow"))
@pytest.mark.parametrize("sid", WINDOW_IDS)
def test_contract_on_suite_scenarios(sid, scenario):
    check_contract(sid, suite_context(scenario))


@lru_cache(maxsize=None)
def suite_context(name: str) -> ContextState:
    return build_context(find_scenario(name), 0)


def removal_order(sid: str, state: ContextState) -> list[str]:
    """Test oracle: the order in which each removal strategy must remove units."""
    candidates = [u for u in state.units if not u.pinned]
    if sid == "remove_oldest":  # FIFO
        return [u.id for u in candidates]
    if sid == "remove_low_priority":  # P3, then P2, then P1; oldest first within a priority
        return [u.id for p in (3, 2, 1) for u in candidates if u.priority == p]
    scores, _ = relevance_scores(state, candidates, StrategyContext())  # least relevant first
    return [candidates[i].id for i in sorted(range(len(candidates)), key=lambda i: (scores[i], i))]


@pytest.mark.parametrize("sid", REMOVAL_IDS)
@SETTINGS
@given(state=states())
def test_removal_follows_its_order_and_stops_at_the_target(sid, state):
    """remove_oldest removes in order, remove_low_priority P3 before P2 before P1,
    selective the least relevant; each stops as soon as the state fits."""
    result = get_strategy(sid).apply(state)
    order = removal_order(sid, state)
    k = 0
    while k < len(order) and state.total_tokens - state.tokens_of(state.unit(uid) for uid in order[:k]) > state.limit:
        k += 1
    assert set(result.removed) == set(order[:k])
    assert result.compressed == () and result.summarized == ()
    unprotected = state.tokens_of(u for u in state.units if not u.pinned)
    if state.total_tokens - unprotected <= state.limit:  # enough unprotected tokens: it fits
        assert result.state.fits()


def test_selective_drops_off_topic_units_for_the_task_or_a_query():
    topical = [unit(i, content=f"The database schema migration step {i} adds an index and a rollback plan.") for i in range(4)]
    off = [unit(10 + i, content=f"Recipe {i}: bake the bread, water the garden, and watch the football concert.") for i in range(4)]
    units = [u for pair in zip(topical, off) for u in pair]
    full = state_of(units, limit=10_000).total_tokens
    state = state_of(units, limit=full - 30)
    gone = removed_ids(state, get_strategy("selective").apply(state).state)
    assert gone and set(gone) <= {u.id for u in off}
    by_query = removed_ids(state, get_strategy("selective", query="bread recipe garden football").apply(state).state)
    assert by_query and set(by_query) <= {u.id for u in topical}


def test_target_percent_compacts_below_that_share_of_the_limit():
    state = state_of([unit(i, words=60) for i in range(10)], limit=700)
    for sid in REMOVAL_IDS:
        new = get_strategy(sid, target_percent=70).apply(state).state
        assert new.total_tokens <= 490 < state.total_tokens
    # a state already under the limit is still compacted to 70 % (seed 000's ContextWindow)
    roomy = state_of(state.units, limit=state.total_tokens + 50)
    assert not get_strategy("remove_oldest").applicable(roomy)
    assert get_strategy("remove_oldest", target_percent=70).apply(roomy).state.fits(int(roomy.limit * 0.7))


def test_pinned_units_survive_and_only_unpinned_are_removed():
    """Seed 000: 'Pinned items survive compaction' (RemoveLowPriority)."""
    units = [unit(0, pinned=True, priority=3, words=80)] + [unit(i, priority=3) for i in range(1, 6)]
    state = state_of(units, limit=150)
    new = get_strategy("remove_low_priority").apply(state).state
    assert new.unit_ids == ("u0",)
    assert not get_strategy("remove_low_priority").applicable(state_of(units[:1], limit=20))


def test_bad_parameters_are_rejected():
    with pytest.raises(StrategyError, match="target_percent"):
        get_strategy("remove_oldest", target_percent=150)
    with pytest.raises(StrategyError, match="summary_ratio"):
        get_strategy("summarize", ratio=0.3)


# ---- summarize -------------------------------------------------------------------------------


def mixed_state(limit_share: float) -> ContextState:
    units = [unit(0, pinned=True, words=30)]
    units += [unit(i, priority=(3, 2, 1)[i % 3], words=90) for i in range(1, 13)]
    full = state_of(units, limit=100_000).total_tokens
    return state_of(units, limit=int(full * limit_share))


def test_summarize_folds_p3_first_into_one_summary_where_the_first_was():
    state = mixed_state(0.8)
    result = get_strategy("summarize").apply(state)
    new = result.state
    assert new.fits() and result.summarized and result.removed == ()
    folded = [state.unit(uid) for uid in result.summarized]
    assert {u.priority for u in folded} == {3}, "P3 alone was enough"
    (summary,) = [u for u in new.units if u.id not in state]
    assert summary.type == "summary" and summary.source_ids == result.summarized
    assert new.position(summary.id) == state.position(folded[0].id)
    assert summary.token_count <= summary_overhead(state) + max(MIN_SUMMARY_TOKENS, sum(u.token_count for u in folded) // 4)


def test_summarize_folds_p2_when_p3_is_not_enough_and_never_p1():
    state = mixed_state(0.45)
    result = get_strategy("summarize").apply(state)
    folded = {state.unit(uid).priority for uid in result.summarized}
    assert folded == {2, 3}
    assert all(u.id in result.state for u in state.units if u.priority == 1)
    p3_only = get_strategy("summarize", fold_p2=False).apply(state)
    assert {state.unit(uid).priority for uid in p3_only.summarized} == {3}
    assert not p3_only.state.fits()


@SETTINGS
@given(state=states())
def test_summarize_fits_when_low_priority_tokens_suffice(state):
    strategy = get_strategy("summarize")
    foldable = [u for u in state.units if not u.pinned and u.priority > 1]
    excess = state.total_tokens - state.limit
    result = strategy.apply(state)
    if excess > 0 and state.tokens_of(foldable) - summary_overhead(state) - MIN_SUMMARY_TOKENS >= excess:
        assert result.state.fits()
    assert all(state.unit(uid).priority > 1 for uid in result.summarized)


def test_summarize_keeps_folded_user_rules_when_the_target_is_out_of_reach():
    rules = [f"Never push release {k} to the main branch without two reviews from the platform team." for k in range(4)]
    units = [unit(0, priority=1, words=200), unit(1, priority=3, words=100)]
    units += [unit(2, priority=3, content=" ".join(rules)), unit(3, priority=3, words=100)]  # u2: a user message
    state = state_of(units, limit=60)
    result = get_strategy("summarize").apply(state)
    assert result.summarized and not result.state.fits()
    assert all(rule in result.state.render() for rule in rules)
