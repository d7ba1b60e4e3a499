"""Design document 002 (Context Compaction Production Design v2), tested as it states its promises.

Sections cited: "Provider-Aware Token Budgeting", "Rehydration" (sensitivity
gating), "Core Data Structures" (*CompactionPlan*: records keyed by message
id, precedence Drop > Externalize > Summarize > Clear > Include; *StructuredSummary*:
"Plain-text summaries drift over time ... Structured summaries prevent this"),
"Rendering" (*PromptRenderer*: thread + plan → prompt) and "Testing Strategy"
(*Invariant Tests*: facts survive N compaction cycles; *Summary Drift Tests*:
repeated summarization keeps the constraints).
"""

from __future__ import annotations

import json

import pytest

from ctxsim.lab.cli import main
from ctxsim.lab.contexts import build_context
from ctxsim.model import ContextState, ContextUnit
from ctxsim.plan import Action, CompactionPlan, PlanRecord, plan_of, render
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import StrategyContext, get_strategy, list_strategies

CYCLES = 10
CONSTRAINT = "Never delete production data."


def _cycles(strategy_id: str, seed: int):
    """Overflows that repeat as the conversation goes on: the fact-dense context
    arrives in 11 parts; after each part the strategy compacts to 60 % of the size.
    Yields (values the summaries held before the cycle, rendered result after it)."""
    full = build_context(find_scenario("fact-dense"), seed)
    values = [f.value for f in full.fact_table]
    n = len(full.units)
    step = n // (CYCLES + 2)
    state = full.with_units(full.units[: n - CYCLES * step])
    for cycle in range(CYCLES):
        end = n if cycle == CYCLES - 1 else n - (CYCLES - 1 - cycle) * step
        state = state.with_units(list(state.units) + list(full.units[n - (CYCLES - cycle) * step : end]))
        carried = {v for v in values for u in state.units if u.type == "summary" and v in u.content}
        state = get_strategy(strategy_id).apply(state, StrategyContext(target_tokens=state.total_tokens * 6 // 10)).state
        yield carried, state.render()


@pytest.mark.parametrize("strategy_id", ["summarize_old", "compact_keep_recent"])
def test_invariant_what_a_summary_carried_survives_ten_compaction_cycles(strategy_id):
    """*Invariant Tests*: "Critical facts must survive N compaction cycles" — every
    value a summary held is still in the context after the next cycle, while new
    material with new values keeps arriving."""
    held = 0
    for carried, rendered in _fact_cycles(strategy_id):
        assert not [v for v in carried if v not in rendered], f"{strategy_id}: a summary of summaries dropped a value"
        held += len(carried)
    assert held > 0, "the fixture must put values into summaries"


def test_invariant_holds_on_the_fact_dense_scenario():
    """The same invariant on a generated session (planted values, compact_keep_recent)."""
    held = 0
    for cycle, (carried, rendered) in enumerate(_cycles("compact_keep_recent", 0)):
        lost = sorted(v for v in carried if v not in rendered)
        assert not lost, f"cycle {cycle + 1}: summary of summaries dropped {lost}"
        held += len(carried)
    assert held > 0


TOPICS = "garden football lecture concert recipe weather novel painting travel meeting calendar exam".split()


def _chatter(turn: int, sentences: int = 30) -> str:
    return " ".join(
        f"The {TOPICS[(turn + i) % 12]} and the {TOPICS[(turn * 5 + i) % 12]} came up in the notes."
        for i in range(sentences)
    )


def _fact_cycles(strategy_id: str):
    """Ten overflows: each turn brings two new values amid chatter; after each turn
    the strategy compacts to 60 % of the size."""

    def turn_unit(turn: int) -> ContextUnit:
        text = (
            f"{_chatter(turn, 6)} The {TOPICS[turn % 12]} budget is ${turn},{turn:03d}. {_chatter(turn + 1, 6)} "
            f"Ticket TK-{4000 + turn} tracks the {TOPICS[(turn + 3) % 12]} work. {_chatter(turn + 2, 6)}"
        )
        return ContextUnit(f"m{turn}", "message", text, role="assistant", turn=turn, priority=2)

    # compact_keep_recent sizes its summary to the target (its cap, 2,000 tokens, stays a hard limit)
    strategy = get_strategy(strategy_id, **({"summary_length": 80} if strategy_id == "summarize_old" else {}))
    state = ContextState(units=tuple(turn_unit(t) for t in range(10)), limit=100_000, min_limit=10, task="Plan the garden")
    values = [f"${t},{t:03d}" for t in range(40)] + [f"TK-{4000 + t}" for t in range(40)]
    for turn in range(10, 30, 2):
        state = state.with_units(list(state.units) + [turn_unit(turn), turn_unit(turn + 1)])
        carried = {v for v in values for u in state.units if u.type == "summary" and v in u.content}
        state = strategy.apply(state, StrategyContext(target_tokens=state.total_tokens * 6 // 10)).state
        yield carried, state.render()


def test_no_summary_drift_the_constraint_survives_ten_summaries():
    """*Summary Drift Tests*: "Repeated summarization doesn't lose pinned
    constraints" — a rule stated once, then summarized with new material ten times."""

    def chatter(turn: int) -> ContextUnit:
        return ContextUnit(f"m{turn}", "message", _chatter(turn), role="assistant", turn=turn, priority=3)

    units = [ContextUnit("rule", "message", f"Before we start: {CONSTRAINT}", role="user", turn=0, priority=2)]
    units += [chatter(t) for t in range(1, 8)]
    state = ContextState(units=tuple(units), limit=100_000, min_limit=10, task="Plan the garden")
    turn = 8
    for _ in range(CYCLES):
        state = get_strategy("summarize_old", summary_length=60).apply(state).state
        state = state.with_units(list(state.units) + [chatter(turn), chatter(turn + 1)])
        turn += 2
        assert CONSTRAINT in state.render()
    assert max(u.summary_depth for u in state.units) >= CYCLES - 1, "the rule went through every summary"


# ---- CompactionPlan and PromptRenderer ---------------------------------------------------
@pytest.mark.parametrize("scenario", ["chat-10k", "tool-dupes", "prior-summaries", "pinned-instructions", "transcript-humanevalfix"])
def test_every_strategy_step_is_a_plan_the_renderer_reproduces(scenario):
    """What a strategy decided is data: rendering the plan on the thread gives the
    strategy's own result, unit for unit."""
    state = build_context(find_scenario(scenario), 0)
    for sid in list_strategies():
        if sid == "error":
            continue
        after = get_strategy(sid).apply(state).state
        plan = plan_of(state, after, sid)
        assert render(state, plan).units == after.units, sid
        assert {r.action for r in plan.records} <= set(Action) - {Action.INCLUDE}
        assert plan.describe().startswith(f"compaction plan of {sid}: {state.total_tokens:,} -> {after.total_tokens:,}")


def test_cli_plan_prints_the_plan_of_each_step(capsys):
    assert main(["plan", "--scenario", "chat-10k", "--strategy", "summarize_old", "--strategy", "discard_low_rel"]) == 0
    out = capsys.readouterr().out
    assert "compaction plan of summarize_old:" in out and "compaction plan of discard_low_rel:" in out
    assert "  summarize " in out


def test_a_plan_applies_to_the_agents_own_thread_after_new_messages_arrive():
    state = build_context(find_scenario("chat-10k"), 0)
    after = get_strategy("summarize_old").apply(state).state
    plan = plan_of(state, after, "summarize_old")
    newer = ContextUnit("late-1", "message", "One more question about the rollout.", role="user", turn=999)
    grown = state.with_units(list(state.units) + [newer])
    assert render(grown, plan).units == after.units + (newer,)


def _unit(uid: str, text: str = "text") -> ContextUnit:
    return ContextUnit(uid, "message", text, role="assistant")


def test_precedence_drop_over_externalize_over_summarize_over_rewrite():
    thread = ContextState(units=tuple(_unit(f"m{i}") for i in range(5)), limit=1000, min_limit=10)
    summary = ContextUnit("s", "summary", "summary of m0-m2", role="assistant", source_ids=("m0", "m1", "m2"))
    pointer = ContextUnit("p", "placeholder", "pointer to m2-m3", role="assistant", meta=(("artifact_id", "art-1"),))
    plan = CompactionPlan("test", (
        PlanRecord(Action.REWRITE, ("m0",), _unit("m0", "short")),
        PlanRecord(Action.SUMMARIZE, ("m0", "m1", "m2"), summary),
        PlanRecord(Action.EXTERNALIZE, ("m2", "m3"), pointer),
        PlanRecord(Action.DROP, ("m3",)),
    ))
    assert [plan.action_of(f"m{i}")[0] for i in range(5)] == [
        Action.SUMMARIZE, Action.SUMMARIZE, Action.EXTERNALIZE, Action.DROP, Action.INCLUDE
    ]
    assert len(plan.warnings) == 3 and "drop takes precedence" in plan.warnings[-1]
    assert [u.id for u in render(thread, plan).units] == ["s", "p", "m4"]


def test_plan_records_are_checked():
    with pytest.raises(ValueError, match="at least one message id"):
        PlanRecord(Action.DROP, ())
    with pytest.raises(ValueError, match="needs replacement"):
        PlanRecord(Action.SUMMARIZE, ("m0",))


def test_a_span_whose_first_message_is_dropped_renders_at_its_next_one():
    thread = ContextState(units=tuple(_unit(f"m{i}") for i in range(3)), limit=1000, min_limit=10)
    summary = ContextUnit("s", "summary", "summary of m0-m1", role="assistant")
    plan = CompactionPlan("test", (PlanRecord(Action.SUMMARIZE, ("m0", "m1"), summary), PlanRecord(Action.DROP, ("m0",))))
    assert [u.id for u in render(thread, plan).units] == ["s", "m2"]
    assert [u.id for u in render(thread.with_units(thread.units[2:]), plan).units] == ["m2"], "no message of the span"


# ---- Rehydration: sensitivity gating ------------------------------------------------------
def test_rehydration_gates_sensitive_artifacts():
    """"Sensitivity gating: only auto-rehydrates public/internal by default"."""
    from ctxsim.model import Artifact
    from ctxsim.lab.stream.rehydration import RehydrationConfig, Rehydrator

    levels = ("public", "internal", "confidential", "restricted")
    artifacts = tuple(Artifact(f"art-{level}", f"Content of the {level} report.", (f"u-{level}",), sensitivity=level)
                      for level in levels)
    state = ContextState(units=(_unit("m0"),), limit=5000, min_limit=500, artifacts=artifacts)
    asking = [ContextUnit("q", "message", "Show " + ", ".join(a.id for a in artifacts) + " again.", role="user", turn=5)]
    rehydrator = Rehydrator(RehydrationConfig(max_artifacts_per_turn=4), state.limit)
    assert [r.artifact_id for r in rehydrator.inject(asking, state, {}, turn=5)] == ["art-public", "art-internal"]
    assert rehydrator.sensitivity_skips == 2
    everything = Rehydrator(RehydrationConfig(max_artifacts_per_turn=4, auto_rehydrate_sensitivities=levels), state.limit)
    assert len(everything.inject(asking, state, {}, turn=5)) == 4


def test_an_artifact_is_as_sensitive_as_its_most_sensitive_unit():
    span = [ContextUnit(f"u{i}", "tool_result", "secret output " * 200, role="tool", turn=i,
                        meta=(("sensitivity", level),)) for i, level in enumerate(("public", "confidential", "internal"))]
    from ctxsim.strategies.ladder import sensitivity_of

    assert sensitivity_of(span) == "confidential"
    assert sensitivity_of(span[:1]) == "public" and sensitivity_of([_unit("x")]) == "internal"


# ---- Provider-aware token budget -----------------------------------------------------------
TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "run_tests", "description": "Run the test suite and return the failures.",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}},
]
SYSTEM = "You are a careful coding agent. Follow the user's rules and keep the To Do List current."


@pytest.mark.parametrize("strategy_id", ["compact_keep_recent", "hybrid", "summarize"])
def test_budget_stays_under_the_limit_with_real_overhead(strategy_id):
    """*Budget Tests*: "Total request size never exceeds budget" — system prompt and
    tool schemas included, the reply's safety buffer and the rehydration reserve kept free."""
    from ctxsim.budget import TokenBudget
    from ctxsim.tokens import count_messages, count_tokens

    state = build_context(find_scenario("chat-10k"), 0)
    budget = TokenBudget.for_request(8000, system_prompt=SYSTEM, tools=TOOLS, safety_buffer_tokens=300,
                                     rehydration_reserve_tokens=500)
    after = get_strategy(strategy_id).apply(state, StrategyContext(target_tokens=budget.available_for_messages)).state
    if after.total_tokens > budget.available_for_messages:
        pytest.skip(f"{strategy_id} cannot reach the target on this context")
    request = count_messages([{"role": "system", "content": SYSTEM}] + after.render_messages(), after.message_format)
    request += sum(count_tokens(json.dumps(t, sort_keys=True, separators=(",", ":"))) for t in TOOLS)
    assert request <= int(8000 * 0.85) - 300 - 500


def test_budget_counts_its_parts_and_rejects_bad_values():
    from ctxsim.budget import TokenBudget, tool_schema_tokens
    from ctxsim.errors import ConfigError

    budget = TokenBudget.for_request(100_000, system_prompt=SYSTEM, tools=TOOLS)
    assert budget.tool_schema_tokens == tool_schema_tokens(TOOLS) > 40
    assert budget.available_for_messages == 85_000 - budget.system_prompt_tokens - budget.tool_schema_tokens - 500 - 2000
    assert budget.available_for_rehydration == 2000
    with pytest.raises(ConfigError, match="soft_threshold must be in \\(0, 1\\], got 1.5"):
        TokenBudget(1000, soft_threshold=1.5)
    with pytest.raises(ConfigError, match="no room for messages"):
        TokenBudget(2000)
    # the bound each message states is the one it applies (it said >= 0 of a window of 0 tokens)
    with pytest.raises(ConfigError, match="max_input_tokens must be an integer >= 1, got 0"):
        TokenBudget(0)
    with pytest.raises(ConfigError, match="system_prompt_tokens must be an integer >= 0, got -1"):
        TokenBudget(100_000, system_prompt_tokens=-1)
