"""Design document 004 (Context Window Management, multi-provider), tested as it states its promises.

Sections cited: "Architecture" (the flow: < 75 % proceed, 75-90 % background
compaction, 90-95 % forced compaction, > 95 % error with recovery options),
"Model limits" ("200K", "1M", 128K fallback), "Compaction options"
(``keepRecentMessages`` 6, ``maxSummaryTokens`` 2000, ``preserveRules``,
``preserveToolResults``) and "Automatic pruning" (deduplicate tool results,
supersede writes, purge old errors).
"""

from __future__ import annotations

import logging

import pytest

from ctxsim.config import model_limit, parse_token_count, usage_tier
from ctxsim.errors import ContextError, RecoveryError
from ctxsim.model import ContextState, ContextUnit, ToolEnvelope
from ctxsim.strategies import StrategyContext, get_strategy, list_strategies, strategy_class
from ctxsim.window import RECOVERY_OPTIONS, ContextItem, ContextWindow, ContextWindowExceeded

MAX = 2000


def _window(share: float, **kwargs) -> ContextWindow:
    """A window filled to about ``share`` of ``MAX`` tokens with P3 chatter (no auto-compaction)."""
    window = ContextWindow(MAX, compaction_threshold=100.0, default_strategy="remove_oldest", **kwargs)
    window.add(ContextItem("You are the billing agent.", "system_prompt", pinned=True, id="sys"))
    turn = 0
    while window.usage_percent < share * 100 - 3:
        window.add(ContextItem(f"Turn {turn}: " + "notes about the garden and the concert " * 6, "user_message",
                               priority=20, id=f"t{turn}"))
        turn += 1
    return window


# ---- tiers and their actions ------------------------------------------------------------
def test_tiers_begin_at_75_90_95_percent():
    assert [usage_tier(t, 100) for t in (74, 75, 89, 90, 94, 95)] == [
        "safe", "warning", "warning", "critical", "critical", "exceeded"
    ]


def test_safe_proceeds_without_compaction():
    window = _window(0.5)
    action = window.check_usage()
    assert (action.tier, action.action, window.stats().compaction_count) == ("safe", "none", 0)


def test_warning_compacts_in_the_background():
    window = _window(0.8)
    assert window.usage_tier == "warning"
    action = window.check_usage()
    assert action.action == "background" and action.background is not None
    freed = action.background.result(timeout=60)
    assert window.usage_tier == "safe" and window.stats().compaction_count == 1
    assert freed > 0 and freed == window.stats().total_tokens_freed


def test_a_failed_background_compaction_reaches_the_caller_and_the_log(caplog):
    # the recovery mode "error" as the strategy: a real compaction that raises (BREAKER_FAILED)
    window = _window(0.8)
    before = [(item.id, item.content) for item in window.items()]
    with caplog.at_level(logging.ERROR, logger="ctxsim.window"):
        action = window.check_usage(strategy="error")
        assert action.action == "background"
        with pytest.raises(RecoveryError, match="BREAKER_FAILED"):
            action.background.result(timeout=60)
    assert [(item.id, item.content) for item in window.items()] == before
    assert window.stats().compaction_count == 0
    assert any(r.getMessage().startswith("Background compaction failed for agent agent: RecoveryError:")
               and "BREAKER_FAILED" in r.getMessage() for r in caplog.records)


def test_critical_forces_compaction_before_the_turn():
    window = _window(0.92)
    assert window.usage_tier == "critical"
    action = window.check_usage()
    assert action.action == "forced" and action.tokens_freed > 0
    assert window.usage_tier == "safe"


def test_exceeded_is_an_error_with_recovery_options():
    window = _window(0.97)
    with pytest.raises(ContextWindowExceeded) as exc:
        window.check_usage()
    assert exc.value.options == RECOVERY_OPTIONS
    assert {o.action for o in exc.value.options} == {"compact", "fresh_start", "clear"}
    assert "recovery options" in str(exc.value) and window.stats().compaction_count == 0


@pytest.mark.parametrize("action", ["compact", "fresh_start", "clear"])
def test_each_recovery_option_brings_the_window_back(action):
    window = _window(0.97)
    assert window.recover(action) > 0
    assert window.usage_tier == "safe" and "sys" in window


def test_an_unknown_recovery_action_names_the_known_ones():
    with pytest.raises(ContextError, match="unknown recovery action 'reboot'; known: \\['compact', 'fresh_start', 'clear'\\]"):
        _window(0.5).recover("reboot")


# ---- preserveToolResults -----------------------------------------------------------------
def test_preserved_tool_results_survive_compaction():
    window = ContextWindow(MAX, compaction_threshold=100.0, default_strategy="remove_oldest")
    plan = ContextItem("Plan: 1. migrate 2. deploy " * 20, "tool_result", priority=10, id="plan",
                       metadata={"tool_name": "updatePlan"})
    other = ContextItem("ls output " * 60, "tool_result", priority=10, id="ls", metadata={"tool_name": "ls"})
    window.add(plan)
    window.add(other)
    for turn in range(12):
        window.add(ContextItem("chatter about the garden " * 20, "user_message", priority=10, id=f"t{turn}"))
    window.compact(target_percent=20)
    assert "plan" in window and window.get("plan").content == plan.content
    assert "ls" not in window


def test_preserve_tool_results_must_be_names():
    with pytest.raises(ContextError, match="preserve_tool_results"):
        ContextWindow(MAX, preserve_tool_results="updatePlan")


# ---- model limits ------------------------------------------------------------------------
def test_limits_parse_k_and_m_and_unknown_models_fall_back_to_128k():
    assert parse_token_count("200K") == 200_000 and parse_token_count("1M") == 1_000_000
    assert model_limit("no-such-model-anywhere") == 128_000


# ---- compaction: keep the last 6, summary within 2000 tokens, user rules preserved ------------
def test_compaction_keeps_the_last_six_and_the_user_rules():
    rule = "Never delete production data."
    units = [ContextUnit("u0", "message", f"Before anything: {rule}", role="user", turn=0)]
    units += [ContextUnit(f"m{i}", "message", "garden notes and concert plans " * 30, role="assistant", turn=i)
              for i in range(1, 20)]
    state = ContextState(units=tuple(units), limit=1200, min_limit=10, task="Plan the garden")
    strategy = get_strategy("compact_keep_recent")
    after = strategy.apply(state).state
    assert after.unit_ids[-6:] == state.unit_ids[-6:]
    (summary,) = [u for u in after.units if u.type == "summary"]
    assert rule in summary.content and summary.token_count <= strategy.max_tokens


# ---- automatic pruning --------------------------------------------------------------------
def _tool(uid: str, name: str, args: str, text: str, turn: int, outcome: str = "success") -> ContextUnit:
    return ContextUnit(uid, "tool_result", text, role="tool", turn=turn,
                       tool=ToolEnvelope(name, call_id=f"call-{uid}", arguments=args, outcome=outcome,
                                         error_message="boom" if outcome == "failure" else None))


def test_pruning_deduplicates_tool_results_keeping_the_newest():
    units = [_tool("a", "read_file", '{"path": "x.py"}', "print(1)\n" * 30, 1),
             _tool("b", "read_file", '{"path": "x.py"}', "print(1)\n" * 30, 5)]
    state = ContextState(units=tuple(units), limit=10_000, min_limit=10)
    after = get_strategy("dedupe_tool_results").apply(state, StrategyContext()).state
    assert after.unit_ids == ("b",)


def test_pruning_purges_old_errors_to_their_message():
    units = [_tool("e", "run", '{"cmd": "make"}', "Traceback ...\n" * 40, 1, outcome="failure")]
    units += [ContextUnit(f"m{i}", "message", "more work", role="assistant", turn=i) for i in range(2, 10)]
    state = ContextState(units=tuple(units), limit=10_000, min_limit=10)
    after = get_strategy("purge_errors").apply(state).state
    assert "e" in after and after.unit("e").token_count < state.unit("e").token_count
    assert "boom" in after.unit("e").content


# ---- user rules survive every compaction ------------------------------------------------------
def _rule_context() -> ContextState:
    topics = "garden football lecture concert recipe weather novel painting travel meeting calendar exam".split()

    def chatter(t: int, n: int = 30) -> str:
        return " ".join(f"The {topics[(t + i) % 12]} and the {topics[(t * 5 + i) % 12]} came up in the notes." for i in range(n))

    units = [ContextUnit("r", "message", f"{chatter(0, 3)} Please remember: never push directly to main. {chatter(1, 3)}",
                         role="user", turn=0, priority=2)]
    units += [ContextUnit(f"m{i}", "message", chatter(i), role="assistant" if i % 2 else "user", turn=i, priority=2)
              for i in range(1, 20)]
    return ContextState(units=tuple(units), limit=2000, min_limit=10, task="Plan the garden")


@pytest.mark.parametrize("strategy_id", [s for s in list_strategies() if not strategy_class(s).recovery])
def test_every_compaction_preserves_a_user_rule_that_only_the_text_marks(strategy_id):
    """"preserveRules: true": a P2 user message states the rule; no fact table, no P1 tag."""
    state = _rule_context()
    after = get_strategy(strategy_id).apply(state).state
    assert "never push directly to main" in after.render()
