"""Recovery modes: fresh_start (seed 001), truncate (seed 003's paragraph truncation), error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxsim.errors import RecoveryError
from strategy_contract import apply_with_contract

from ctxsim.lab.contexts import build_context
from ctxsim.model import ContextState, ContextUnit
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import BREAKER_FAILED, RECOVERY_TRIGGERED, get_strategy
from ctxsim.tokens import count_tokens

RECOVERY_IDS = ("fresh_start", "truncate")
RULE = "Never delete production data."
TASK = "Ship the invoice export for the billing team"
TOPICS = ("invoice totals", "export format", "billing API", "retry queue", "audit log", "CSV columns")


def paragraphs(i: int, count: int, sentences: int = 3) -> str:
    """``count`` paragraphs of ``sentences`` sentences, numbered so each is recognizable."""
    return "\n\n".join(
        " ".join(f"Paragraph {i}.{p} sentence {s} covers the {TOPICS[(i + p + s) % len(TOPICS)]}." for s in range(sentences))
        for p in range(count)
    )


def unit(i: int, content: str, *, priority: int = 2, pinned: bool = False, role: str = "assistant") -> ContextUnit:
    return ContextUnit(id=f"u{i}", type="message", role=role, content=content, turn=i, timestamp=float(i),
                       priority=priority, pinned=pinned)


def state_of(units, *, limit: int) -> ContextState:
    return ContextState(units=tuple(units), limit=limit, min_limit=10, task=TASK)


def session(n: int = 12) -> list[ContextUnit]:
    units = [unit(0, "System: you are the billing agent.", pinned=True, role="system")]
    units.append(unit(1, f"{RULE} Always keep the audit log.", priority=1, role="user"))
    units += [unit(i, paragraphs(i, 4), priority=(2, 3)[i % 2]) for i in range(2, n)]
    return units


@st.composite
def states(draw) -> ContextState:
    n = draw(st.integers(1, 12))
    units = []
    for i in range(n):
        kind = draw(st.sampled_from(("text", "text", "rule", "pinned")))
        if kind == "rule":
            units.append(unit(i, f"{RULE} Step {i}.", priority=1, role="user"))
        else:
            units.append(unit(i, paragraphs(i, draw(st.integers(1, 6)), draw(st.integers(1, 4))),
                              priority=draw(st.sampled_from((1, 2, 3))), pinned=kind == "pinned"))
    total = state_of(units, limit=10**6).total_tokens
    return state_of(units, limit=max(10, int(total * draw(st.floats(0.2, 1.2)))))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_contract(sid: str, state: ContextState) -> None:
    strategy, result = apply_with_contract(sid, state)
    new = result.state
    assert result.recovery and strategy.recovery
    pinned = [u for u in state.units if u.pinned]
    assert [u for u in new.units if u.pinned] == pinned, "pinned units kept, in order"
    if sid == "truncate":
        assert new.total_tokens <= state.total_tokens
        if state.total_tokens - state.tokens_of(u for u in state.units if not u.pinned) <= state.limit:
            assert new.fits()
    elif result.changed:
        assert new.units[: len(pinned)] == tuple(pinned) and len(new.units) == len(pinned) + 1
        if state.tokens_of(pinned) + 503 + 3 <= state.limit:  # pinned + a 500-token handover + priming fit
            assert new.fits()
    if result.changed:
        assert RECOVERY_TRIGGERED in {e.code for e in result.events}


@pytest.mark.parametrize("sid", RECOVERY_IDS)
@SETTINGS
@given(state=states())
def test_contract(sid, state):
    check_contract(sid, state)


@pytest.mark.parametrize("scenario", ("huge-units", "pinned-instructions", "mild-overflow", "transcript-ctf-katy"))
@pytest.mark.parametrize("sid", RECOVERY_IDS)
def test_contract_on_suite_scenarios(sid, scenario):
    check_contract(sid, build_context(find_scenario(scenario), 0))


# ---- fresh start -------------------------------------------------------------------------------


def test_fresh_start_handover_names_the_task_and_keeps_p1_rules():
    units = session(40)
    state = state_of(units, limit=state_of(units, limit=10**6).total_tokens // 2)
    result = get_strategy("fresh_start").apply(state)
    new = result.state
    assert new.units[0] == units[0]
    (handover,) = new.units[1:]
    assert handover.token_count <= 500
    assert handover.content.startswith("Resuming from overflow:")
    assert handover.content.endswith(f"Continue task: {TASK}.")
    assert RULE in handover.content, "P1 rule kept verbatim"
    assert (handover.type, handover.role, handover.priority) == ("summary", "assistant", 1)
    assert set(handover.source_ids) == {u.id for u in units[1:]}
    assert result.summarized == tuple(u.id for u in units[1:])
    assert result.cost.llm_calls == 1 and result.cost.llm_input_tokens == state.tokens_of(units[1:])
    assert new.fits()


def test_fresh_start_keeps_a_rule_after_a_code_fence_an_extract_left_open():
    """A P1 message compressed in place may keep a snippet's opening fence and not its
    closing one; the rule after it is still a rule to the handover summary."""
    units = session(40)
    units[1] = unit(1, f"The code in question:\n```python\ndef export(rows):\n{RULE} Always keep the audit log.",
                    priority=1, role="user")
    state = state_of(units, limit=state_of(units, limit=10**6).total_tokens // 2)
    handover = get_strategy("fresh_start").apply(state).state.units[1]
    assert RULE in handover.content, "the rule after the open fence kept verbatim"


def test_fresh_start_handover_size_and_long_tasks_are_bounded():
    units = session(40)
    long_task = "Ship the export. " * 300
    state = ContextState(units=tuple(units), limit=1000, min_limit=10, task=long_task)
    for budget in (120, 500):
        handover = get_strategy("fresh_start", handover_tokens=budget).apply(state).state.units[-1]
        assert handover.token_count <= budget
        assert handover.content.startswith("Resuming from overflow:") and "Continue task: Ship the export." in handover.content


def test_fresh_start_may_grow_a_tiny_context_and_needs_an_unpinned_unit():
    tiny = state_of([unit(0, "ok", role="user")], limit=10)
    result = get_strategy("fresh_start").apply(tiny)
    assert result.changed and result.tokens_after > result.tokens_before, "only recovery may grow"
    only_pinned = state_of([unit(0, "pinned", pinned=True)], limit=10)
    assert not get_strategy("fresh_start").applicable(only_pinned)
    assert not get_strategy("fresh_start").apply(only_pinned).changed


# ---- truncate ----------------------------------------------------------------------------------


def test_truncate_keeps_the_newest_and_cuts_the_next_at_a_paragraph_boundary():
    units = session(10)
    full = state_of(units, limit=10**6)
    # room for pinned + the newest 3 units whole + about 2.5 paragraphs of the 4th newest
    keep = units[-3:]
    para_tokens = count_tokens(paragraphs(6, 1))
    limit = full.total_tokens - full.tokens_of(units[1:-3]) + full.unit_cost(units[-4]) - int(1.5 * para_tokens)
    state = state_of(units, limit=limit)
    result = get_strategy("truncate").apply(state)
    new = result.state
    assert new.fits()
    assert new.unit_ids == ("u0", units[-4].id) + tuple(u.id for u in keep)
    assert new.units[-3:] == tuple(keep) and new.units[0] == units[0]
    cut = new.unit(units[-4].id).content
    original = units[-4].content.split("\n\n")
    assert cut in {"\n\n".join(original[:k]) for k in range(1, len(original))}, "cut at a paragraph boundary"
    assert result.compressed == (units[-4].id,)
    assert set(result.removed) == {u.id for u in units[1:-4]}


def test_truncate_drops_a_unit_when_not_even_a_word_fits_and_keeps_order():
    units = [unit(0, paragraphs(0, 2)), unit(1, "pinned rule", pinned=True), unit(2, paragraphs(2, 2)), unit(3, "short")]
    full = state_of(units, limit=10**6)
    state = state_of(units, limit=full.total_tokens - full.unit_cost(units[0]) - full.unit_cost(units[2]) + 3)  # room for the framing only
    new = get_strategy("truncate").apply(state).state
    assert new.unit_ids == ("u1", "u3")
    assert not get_strategy("truncate").applicable(state_of(units, limit=full.total_tokens))


# ---- error -------------------------------------------------------------------------------------


def test_error_mode_raises_breaker_failed():
    state = state_of(session(), limit=200)
    strategy = get_strategy("error")
    assert strategy.applicable(state) and strategy.recovery
    with pytest.raises(RecoveryError, match=BREAKER_FAILED) as info:
        strategy.apply(state)
    message = str(info.value)
    assert str(state.total_tokens) in message and "200" in message and "recovery_mode" in message


def test_error_mode_says_nothing_false_of_a_context_that_fits():
    """Applied to a context under its limit (as ``ctxsim plan`` may), the error gives the
    numbers without saying the context does not fit."""
    state = state_of(session(), limit=100_000)
    with pytest.raises(RecoveryError, match=BREAKER_FAILED) as info:
        get_strategy("error").apply(state)
    message = str(info.value)
    assert f"context of {state.total_tokens} tokens, limit 100000" in message and "not fit" not in message
