"""Design document 001 (Context Management System v3.6), tested as it states its promises.

Sections cited: "Breaking Strategies" (each strategy's *Priority Handling* line),
"Test Suite Specification" (*Priority Tests*: P1 preservation, P3 discarding;
*Weird Cases*) and "Integration Points" (*With Priority System*).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.metrics import p1_preserved, retained
from ctxsim.model import ContextState, ContextUnit, Fact
from ctxsim.probes import probe_scores
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import ContextBudget, StrategyContext, get_strategy

#: the breaking strategies of the document that are not recovery modes
BREAKING = ("summarize_old", "prioritize_recent", "content_type_chunking", "discard_low_rel", "hybrid")
RULE = "Please remember: never delete production data. This is not negotiable."
FACT = "The staging gateway listens on port 51826 behind the VPN."
TOPICS = "garden football lecture concert recipe weather novel painting travel meeting calendar exam".split()


def chatter(n: int, start: int = 0) -> str:
    """``n`` distinct off-task sentences (no digits, no names, no rules)."""
    return " ".join(
        f"The {TOPICS[(start + i) % 12]} and the {TOPICS[(start + 3 * i + 1) % 12]} came up again in the notes "
        f"about the {TOPICS[(start + 5 * i + 2) % 12]}."
        for i in range(n)
    ) + " "


#: the scenarios as written for the chat-style generator (facts stated in prose messages)
CHAT_SUITE = Path(__file__).parent / "chat_scenarios"


def _contexts(name: str, seeds=range(3), suite: Path | None = None) -> list[ContextState]:
    scenario = find_scenario(name, suite)
    return [build_context(scenario, seed) for seed in seeds]


# ---- "Priority Tests: P1 preservation" --------------------------------------------------------
@pytest.mark.parametrize("scenario", ["fact-dense", "chat-10k"])
@pytest.mark.parametrize("strategy_id", BREAKING)
def test_priority_p1_and_user_rules_survive_every_breaking_strategy(scenario, strategy_id):
    """"P1 = must keep": every P1 unit keeps its id and its planted rules and facts,
    and every user rule survives, whatever the breaking strategy."""
    for state in _contexts(scenario):
        after = get_strategy(strategy_id).apply(state).state
        assert retained(state, after, "rule") == 1.0, f"{strategy_id} lost a user rule (seed {state.seed})"
        assert p1_preserved(state, after) == 1.0, f"{strategy_id} lost P1 content (seed {state.seed})"


def test_prioritize_recent_keeps_every_p1_unit_by_id():
    """Strategy 2, *When to Use*: "ensures P1 stays intact"."""
    for state in _contexts("chat-10k"):
        after = get_strategy("prioritize_recent").apply(state).state
        p1 = [u for u in state.units if u.priority == 1]
        assert p1 and all(u.id in after and after.unit(u.id).content == u.content for u in p1)


def test_summarize_old_compresses_p1_less_and_keeps_its_rule_and_values():
    """Strategy 1, *Priority Handling*: "summarizes non-P1 more aggressively"; a P1
    unit compressed in place keeps its rule and the sentence carrying its value."""
    body = chatter(12) + RULE + " " + chatter(12, 5) + FACT + " " + chatter(8, 7)
    units = [ContextUnit(f"u{i}", "message", body, role="user", turn=i, priority=1 if i == 0 else 2) for i in range(6)]
    state = ContextState(units=tuple(units), limit=400, min_limit=10, task="Plan the garden lecture and the concert")
    after = get_strategy("summarize_old", p1_ratio=0.2).apply(state).state
    p1 = after.unit("u0")
    assert p1.token_count < units[0].token_count, "the old P1 unit is compressed in place"
    assert "never delete production data" in p1.content and "51826" in p1.content


def test_content_type_chunking_never_cuts_a_user_rule():
    """Strategy 3 with seed 004's promise that compaction "preserves user rules": a
    P2 user message compressed to a fifth of its size keeps its rule sentence verbatim."""
    body = chatter(16) + "Also, do not touch the billing schema without a migration. " + chatter(16, 3)
    state = ContextState(units=(ContextUnit("u0", "message", body, role="user", priority=2),), limit=100, min_limit=10)
    after = get_strategy("content_type_chunking", compress_ratios={"text": 0.2}).apply(state).state
    assert after.unit("u0").token_count < state.units[0].token_count
    assert "do not touch the billing schema without a migration." in after.unit("u0").content


def test_p1_preserved_counts_a_unit_only_with_its_planted_rules_and_facts():
    """"priorityPreserved: % P1 units retained": a P1 unit compressed so that its
    planted value is gone is not retained; the value elsewhere in the result counts."""
    unit = ContextUnit("u0", "message", chatter(3) + FACT, role="user", priority=1)
    other = ContextUnit("u1", "message", chatter(2), role="assistant", priority=2)
    fact = Fact("fact-0", "51826", "u0", priority=1)
    original = ContextState(units=(unit, other), limit=1000, min_limit=10, fact_table=(fact,))
    cut = original.with_units([unit.with_content(chatter(3)), other])
    moved = original.with_units([unit.with_content(chatter(3)), other.with_content(FACT)])
    assert p1_preserved(original, original) == 1.0
    assert p1_preserved(original, cut) == 0.0
    assert p1_preserved(original, moved) == 1.0


def test_p1_preserved_asks_a_unit_for_its_rules_and_facts_not_its_other_probes():
    """A P1 write result that keeps its fact but loses the distinctive line of the file
    it wrote is preserved; the artifact probe scores the loss instead."""
    line = "class LedgerExport:"
    unit = ContextUnit("u0", "tool_result", f"Wrote src/app/ledger.py:\n{line}\n    pass\n{FACT}", role="tool", priority=1)
    facts = (
        Fact("fact-0", "51826", "u0", priority=1),
        Fact("artifact-1-line", line, "u0", priority=1, kind="artifact"),
    )
    original = ContextState(units=(unit,), limit=1000, min_limit=10, fact_table=facts)
    compressed = original.with_units([unit.with_content(f"Wrote src/app/ledger.py:\n{FACT}")])
    assert p1_preserved(original, compressed) == 1.0
    assert probe_scores(original, compressed)["artifact"] == 0.0
    assert p1_preserved(original, original.with_units([unit.with_content("Wrote src/app/ledger.py:")])) == 0.0


# ---- "Priority Tests: P3 discarding" ------------------------------------------------------------
def test_discard_low_rel_discards_low_priority_units_and_never_p1():
    """Strategy 4 discards the least relevant units; "Breaking prioritizes P1 units":
    an off-task P1 unit stays while the three off-task P3 units (the 30 % of ten droppable units) go."""
    task = "Finish the database schema migration and plan the rollback."
    on_task = "The database schema migration needs a rollback plan for the index change."
    units = [ContextUnit("p1", "message", chatter(2), role="user", priority=1)]
    units += [ContextUnit(f"p3-{i}", "message", chatter(2, i), role="assistant", priority=3) for i in range(3)]
    units += [ContextUnit(f"on-{i}", "message", on_task, role="assistant", priority=2) for i in range(7)]
    state = ContextState(units=tuple(units), limit=150, min_limit=10, task=task)
    after = get_strategy("discard_low_rel").apply(state).state
    assert "p1" in after
    assert all(f"p3-{i}" not in after for i in range(3))


def test_seed_sketch_semantics_remain_available_with_drop_p1():
    """The sketch protects P1 only by its 1.5x boost; ``drop_p1: true`` restores it."""
    units = [ContextUnit(f"u{i}", "message", chatter(2, i), role="assistant", priority=1) for i in range(8)]
    state = ContextState(units=tuple(units), limit=100, min_limit=10)
    assert get_strategy("discard_low_rel").applicable(state) is False, "nothing but P1 to discard"
    assert get_strategy("discard_low_rel", drop_p1=True).applicable(state) is True


# ---- "Breaking Strategies: Hybrid" with seed 003's budget ------------------------------------
def test_hybrid_runs_a_required_strategy_even_once_the_state_fits():
    state = _contexts("fact-dense", seeds=[0])[0]
    plain = get_strategy("hybrid").apply(state, StrategyContext())
    assert "discard_low_rel" not in plain.note, "the fixture must fit before the chain reaches discard_low_rel"
    budget = ContextBudget(required=("discard_low_rel",))
    required = get_strategy("hybrid").apply(state, StrategyContext(budget=budget))
    assert required.note.split(" → ")[-1] == "discard_low_rel"


def test_hybrid_runs_required_strategies_its_chain_does_not_name_by_priority():
    """Seed 003: required strategies run; higher priority first."""
    state = _contexts("fact-dense", seeds=[0])[0]
    budget = ContextBudget(required=("discard_low_rel", "content_type_chunking"))
    result = get_strategy("hybrid", chain=("summarize_old",)).apply(state, StrategyContext(budget=budget))
    assert result.note.split(" → ") == ["summarize_old", "content_type_chunking", "discard_low_rel"]


# ---- "Integration Points: With Priority System" ------------------------------------------
def test_p1_agents_get_a_20_percent_higher_limit():
    from ctxsim.config import ContextConfig
    from ctxsim.errors import ConfigError

    config = ContextConfig()
    assert config.limit_for("cloud_grok", agent_priority=1) == int(config.limit_for("cloud_grok") * 1.2) == 9600
    assert config.limit_for(agent_priority=3) == config.limit_for() == 5000
    assert ContextConfig(p1_agent_limit_bonus=0.0).limit_for("cloud_grok", agent_priority=1) == 8000
    with pytest.raises(ConfigError, match="agent_priority must be 1, 2 or 3, got 0"):
        config.limit_for(agent_priority=0)


# ---- "Test Suite Specification: Weird Cases" ----------------------------------------------
def test_weird_case_irreducible_context_needs_the_fresh_start():
    """An irreducible context (mostly P1): no breaking strategy can make it fit
    without dropping P1, so recovery takes over; its handover fits and keeps the rules.
    On the chat-style context: in the agent-loop one, P1 tool outputs hold recall facts
    (an error line at the end of a traceback) that in-place compression does not keep."""
    state = _contexts("mostly-p1", seeds=[0], suite=CHAT_SUITE)[0]
    for strategy_id in BREAKING:
        after = get_strategy(strategy_id).apply(state).state
        assert not after.fits(state.limit) and p1_preserved(state, after) == 1.0, strategy_id
    handover = get_strategy("fresh_start").apply(state).state
    assert handover.fits(state.limit) and retained(state, handover, "rule") == 1.0


@pytest.mark.parametrize("scenario", ["fragmented", "misclassified"])
def test_weird_cases_fragmentation_and_type_misclassification_break_with_the_chain(scenario):
    """Hundreds of tiny units, or code labelled as prose: the hybrid chain fits the
    limit and keeps every rule and P1 unit."""
    for state in _contexts(scenario, seeds=[0, 1]):
        after = get_strategy("hybrid").apply(state).state
        assert after.fits(state.limit)
        assert retained(state, after, "rule") == 1.0 and p1_preserved(state, after) == 1.0
