"""Peer systems: each re-implementation's documented behaviour, on hand-built and shipped contexts."""

from __future__ import annotations

import sys

import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.episode import EpisodeSettings, OverflowEpisode
from ctxsim.errors import PolicyError
from ctxsim.model import ContextState, ContextUnit, ToolEnvelope
from ctxsim.policies import fallback_action, get_policy, run_episode
from ctxsim.strategies import StrategyContext
from ctxsim.strategies.peers import (
    AIDER_FRAME,
    CLAUDE_CODE_FRAME,
    CODEX_FRAME,
    LETTA_FRAME,
    OPENCODE_CLEARED,
    OPENCODE_SECTIONS,
    PEERS,
    AdkCompaction,
    AiderHistory,
    AnthropicClear,
    AnthropicCompact,
    ClaudeCodeCompact,
    CodexCompaction,
    LettaSlidingWindow,
    OpenCodeCompaction,
    langchain_available,
)

TASK = "Fix the export job in /srv/export.py"


def words(i: int, n: int) -> str:
    return " ".join(f"token{(i * 11 + k) % 97}" for k in range(n)) + "."


def msg(i: int, role: str, n: int = 40, **kw) -> ContextUnit:
    return ContextUnit(id=f"m{i}", type="message", role=role, content=f"Message {i}: {words(i, n)}", turn=i, **kw)


def tool(i: int, n: int = 120, name: str = "read_file", **kw) -> ContextUnit:
    envelope = ToolEnvelope(tool_name=name, call_id=f"c{i}", arguments=f'{{"path":"/srv/f{i}.py"}}', target=f"/srv/f{i}.py")
    return ContextUnit(id=f"t{i}", type="tool_result", role="tool", content=f"Output {i}: {words(i, n)}", turn=i,
                       tool=envelope, **kw)


def state_of(units, limit: int) -> ContextState:
    return ContextState(units=tuple(units), limit=limit, min_limit=10, task=TASK)


def session() -> list[ContextUnit]:
    """system, then 6 turns of user ask / assistant reply / tool result."""
    units = [msg(0, "system", 30, pinned=True)]
    for turn in range(1, 7):
        units += [msg(10 * turn, "user", 20), msg(10 * turn + 1, "assistant", 30), tool(10 * turn + 2)]
    return units


def ctx(state: ContextState) -> StrategyContext:
    return StrategyContext(target_tokens=state.limit)


def test_anthropic_clears_all_but_the_last_three_tool_results():
    units = session()
    units[3] = tool(12, pinned=True)  # a pinned tool result is never cleared
    state = state_of(units, limit=state_of(units, 10**6).total_tokens - 100)
    result = AnthropicClear().apply(state, ctx(state))
    tools = [u for u in result.state.units if u.tool is not None]
    assert [u.type for u in tools] == ["tool_result", "placeholder", "placeholder", "tool_result", "tool_result", "tool_result"]
    assert tools[1].content == '[read_file {"path":"/srv/f22.py"}] [cleared]' and tools[1].id == "t22"
    assert [u.content for u in tools[3:]] == [u.content for u in state.units if u.id in ("t42", "t52", "t62")]
    excluded = AnthropicClear(exclude_tools=("read_file",)).apply(state, ctx(state))
    assert not excluded.changed
    quiet = state_of(units, limit=state.total_tokens * 3)  # under the 50 % trigger
    assert not AnthropicClear().apply(quiet, ctx(quiet)).changed


def test_opencode_prunes_beyond_the_protected_window_then_summarizes():
    units = session()
    total = state_of(units, 10**6).total_tokens
    tool_tokens = sum(u.token_count for u in units if u.tool)
    # the protected window holds about two tool results; pruning frees more than the minimum
    peer = OpenCodeCompaction(prune_protect_share=2.5 * tool_tokens / 6 / total, prune_minimum_share=0.01)
    roomy = state_of(units, limit=total)  # prune only: the state fits the target afterwards
    pruned = {u.id for u in peer.apply(roomy, ctx(roomy)).state.units if u.content == OPENCODE_CLEARED}
    # t62 and t52 sit in the last two user turns (protected); t42 and t32 fill the window; older ones go
    assert pruned == {"t12", "t22"}
    assert not OpenCodeCompaction(prune_minimum_share=0.9).prune(roomy)
    tight = state_of(units, limit=total // 2)
    new = peer.apply(tight, ctx(tight)).state
    summary = next(u for u in new.units if u.type == "summary")
    assert summary.role == "assistant" and new.units[0].pinned and new.units[1] is summary
    assert all(f"## {title}" in summary.content for title in ("Goal", "Relevant files / directories"))
    assert summary.content.index("## Goal") < summary.content.index("## Relevant files / directories")
    assert "/srv/f12.py" in summary.content and set(OPENCODE_SECTIONS) >= {
        line[3:] for line in summary.content.splitlines() if line.startswith("## ")
    }
    tail = new.units[2:]
    assert tail and new.tokens_of(tail) <= 0.25 * tight.limit and tail[-1] == units[-1]


def test_letta_keeps_the_newest_thirty_percent_and_summarizes_recursively():
    units = session()
    state = state_of(units, limit=state_of(units, 10**6).total_tokens // 2)
    new = LettaSlidingWindow().apply(state, ctx(state)).state
    start = round(0.7 * len(units))
    cut = next(i for i in range(start, len(units)) if units[i].role == "assistant")
    assert new.units[0] == units[0]
    assert new.units[1].role == "user" and new.units[1].content.startswith(LETTA_FRAME)
    assert new.units[2:] == tuple(units[cut:])
    assert set(new.units[1].source_ids) == {u.id for u in units[1:cut]}
    again = LettaSlidingWindow().apply(new, ctx(new)).state  # the summary is folded into the next one
    assert again.units[1].summary_depth == 2 and set(again.units[1].source_ids) > set(new.units[1].source_ids)


def test_codex_keeps_initial_context_and_recent_user_messages():
    units = session()
    total = state_of(units, 10**6).total_tokens
    state = state_of(units, limit=total // 2)
    user_tokens = units[4].token_count + units[7].token_count  # m20, m30: two user messages
    peer = CodexCompaction(user_message_share=(user_tokens * 2 + 2) / state.limit)
    new = peer.apply(state, ctx(state)).state
    ids = [u.id for u in new.units]
    assert ids[:2] == ["m0", "m10"]  # system + first user message
    assert all(state.unit(i).role == "user" for i in ids[2:-1])
    assert ids[-1].startswith("codex-") and new.units[-1].content.startswith(CODEX_FRAME) and new.units[-1].role == "user"
    assert ids[2:-1][-1] == "m60" and len(ids[2:-1]) >= 4  # the newest user messages, in order
    assert not any(state.unit(i).role in ("assistant", "tool") for i in ids[:-1])
    tiny = state_of(units, limit=state.tokens_of(units[:2]) + 80)
    squeezed = peer.apply(tiny, ctx(tiny)).state
    assert [u.id for u in squeezed.units][:2] == ["m0", "m10"] and len(squeezed.units) < len(new.units)


def test_codex_cuts_a_huge_last_user_message_when_nothing_else_is_left():
    # the system prompt, the task, then the user pastes a log far over the limit (no reply yet)
    units = [msg(0, "system", 30, pinned=True), msg(1, "user", 20), msg(2, "user", 3000)]
    state = state_of(units, limit=2000)
    peer = CodexCompaction()
    assert peer.applicable(state, ctx(state))
    new = peer.apply(state, ctx(state)).state
    assert [u.id for u in new.units] == ["m0", "m1", "m2"] and new.units[:2] == state.units[:2]
    assert new.units[2].token_count <= int(peer.params.user_message_share * state.limit) and new.fits(state.limit)
    episode = run_episode(get_policy("peer:codex"), state, EpisodeSettings(), 0)
    assert episode.chain == ("peer:codex",) and episode.outcome.success and not episode.outcome.used_recovery
    within = state_of(units[:2] + [msg(2, "user", 20)], limit=10**6)  # fits, nothing to summarize or cut
    assert not peer.applicable(within, ctx(within)) and peer.apply(within, ctx(within)).state.units == within.units


def test_claude_code_summarizes_everything_then_reattaches_plan_and_five_recent_files():
    units = session() + [msg(65, "user", 4000)]  # a long request makes 2.5 % of the limit room for a file
    units.insert(2, ContextUnit(id="plan", type="plan_ref", role="assistant", content="To Do List: 1. fix export", turn=1))
    units += [tool(70 + i, n=60) for i in range(6)] + [tool(80, n=900)]  # six reads, then one too large to re-attach
    reread = units[-2].tool  # t75's path, read again last: its newest read is the one re-attached
    units.append(ContextUnit(id="t81", type="tool_result", role="tool", content="Output again: " + words(5, 60), turn=81,
                             tool=reread))
    state = state_of(units, limit=state_of(units, 10**6).total_tokens - 50)
    peer = ClaudeCodeCompact()
    assert all(u.token_count <= 0.025 * state.limit for u in units if u.id.startswith("t7"))
    result = peer.apply(state, ctx(state))
    ids = [u.id for u in result.state.units]
    assert ids[0] == "m0" and result.state.units[1].role == "user"
    assert result.state.units[1].content.startswith(CLAUDE_CODE_FRAME)
    assert ids[2:] == ["plan", "t71", "t72", "t73", "t74", "t81"]  # the five newest distinct files that fit
    quiet = state.with_units(state.units, limit=state.total_tokens * 2)  # under 83.5 % of the window
    assert not peer.applicable(quiet, ctx(quiet))


def test_anthropic_compact_keeps_the_system_prompt_and_one_summary():
    units = session()
    state = state_of(units, limit=state_of(units, 10**6).total_tokens - 100)
    result = AnthropicCompact().apply(state, ctx(state))
    assert [u.id for u in result.state.units][0] == "m0" and len(result.state.units) == 2
    summary = result.state.units[1]
    assert summary.role == "assistant" and summary.type == "summary"
    assert set(summary.source_ids) == {u.id for u in units[1:]}
    assert result.state.fits(state.limit)


def test_aider_caps_the_history_and_summarizes_the_head_ending_on_an_assistant_message():
    units = [msg(0, "system", 30, pinned=True)]
    for turn in range(1, 41):
        units += [msg(10 * turn, "user", 60), msg(10 * turn + 1, "assistant", 90)]
    state = state_of(units, limit=16_000)
    peer = AiderHistory()
    assert peer.budget(state) == 1024  # min(max(16,000 / 16, 1,024), 8,192)
    assert peer.budget(state.with_units(state.units, limit=400_000)) == 8192
    result = peer.apply(state, ctx(state))
    new = result.state.units
    summary = next(u for u in new if u.type == "summary")
    assert summary.role == "user" and summary.content.startswith(AIDER_FRAME)
    tail = new[new.index(summary) + 1:]
    assert [u.id for u in tail[-2:]] == ["m400", "m401"]  # the current exchange (from the last user message) stays
    # the newest history under half the budget stays, plus the user message moved back so the head ends on a reply
    assert tail[0].role == "user" and state.tokens_of(tail[1:-2]) < peer.budget(state) // 2 <= state.tokens_of(tail[:-2])
    assert state.unit(summary.source_ids[-1]).role == "assistant"
    small = state_of(units[:5], limit=16_000)
    assert not peer.applicable(small, ctx(small))  # a history within its budget is left alone


def test_adk_summarizes_windows_of_three_turns_with_one_turn_of_overlap():
    units = [msg(0, "system", 20, pinned=True)]
    for turn in range(1, 8):  # seven turns of two units each
        units += [ContextUnit(id=f"u{turn}", type="message", role="user", content=f"Ask {turn}: " + words(turn, 30), turn=turn),
                  ContextUnit(id=f"a{turn}", type="message", role="assistant", content=f"Do {turn}: " + words(turn + 50, 60),
                              turn=turn)]
    state = state_of(units, limit=state_of(units, 10**6).total_tokens - 10)
    result = AdkCompaction().apply(state, ctx(state))
    new = result.state.units
    summaries = [u for u in new if u.type == "summary"]
    assert [sorted(s.source_ids) for s in summaries] == [
        sorted(["u1", "a1", "u2", "a2", "u3", "a3"]),
        sorted(["u3", "a3", "u4", "a4", "u5", "a5", "u6", "a6"]),
    ]
    assert [u.id for u in new] == ["m0", summaries[0].id, summaries[1].id, "u7", "a7"]
    with pytest.raises(Exception, match="overlap_size"):
        AdkCompaction(compaction_interval=2, overlap_size=2)


def test_peer_policy_steps_once_then_falls_back():
    units = [msg(0, "system", 3000, pinned=True), msg(1, "user"), tool(2), msg(3, "assistant")]
    state = state_of(units, limit=state_of(units[:1], 10**6).total_tokens)  # pinned alone fills the limit
    settings = EpisodeSettings(actions=("remove_oldest", "truncate", "fresh_start"))
    policy = get_policy("peer:anthropic-clear")
    episode = run_episode(policy, state, settings, 0)
    assert episode.chain[0] == "peer:anthropic-clear" and episode.chain[1:] == ("fresh_start",)
    assert episode.outcome.used_recovery and not episode.forced_recovery
    fresh = OverflowEpisode(state, settings)
    assert policy.act(fresh) is policy.strategy
    fresh.step(policy.strategy)
    assert policy.act(fresh) == fallback_action(fresh)


def test_peer_parameters_are_validated():
    assert get_policy("peer:letta", keep_share=0.5).strategy.params.keep_share == 0.5
    with pytest.raises(Exception, match="no parameter 'nope'"):
        get_policy("peer:codex", nope=1)


@pytest.fixture(scope="module")
def shipped_contexts(scenario_suite) -> list[ContextState]:
    return [build_context(scenario, 0) for scenario in scenario_suite]


@pytest.mark.parametrize("peer", [p for p in PEERS if p != "langchain-trim" or langchain_available()])
def test_every_peer_runs_on_every_shipped_scenario(shipped_contexts, peer):
    strategy = PEERS[peer]()
    for state in shipped_contexts:
        result = strategy.apply(state, ctx(state))  # the base template raises if a pinned unit breaks
        new = result.state
        pinned = [u for u in state.units if u.pinned]
        assert [u for u in new.units if u.pinned] == pinned, state.scenario
        assert new.total_tokens <= state.total_tokens and result.strategy == f"peer:{peer}"
        assert new.history[-1:] == ((f"peer:{peer}",) if result.changed else state.history[-1:])


def test_langchain_peer_needs_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    with pytest.raises(PolicyError, match="optional extra 'peers'"):
        get_policy("peer:langchain-trim")


@pytest.mark.optional
def test_langchain_trim_is_the_real_library():
    langchain = pytest.importorskip("langchain_core.messages")
    units = session()
    state = state_of(units, limit=state_of(units, 10**6).total_tokens // 2)
    new = PEERS["langchain-trim"]().apply(state, ctx(state)).state
    assert new.fits() and new.units[0] == units[0]
    kept = [u.id for u in new.units[1:]]
    free = [u for u in units if not u.pinned]
    assert kept == [u.id for u in free[len(free) - len(kept):]]  # strategy "last": a suffix
    assert state.tokens_of(free[len(free) - len(kept) - 1:]) + state.unit_cost(units[0]) + 3 > state.limit  # maximal
    direct = langchain.trim_messages(
        [langchain.HumanMessage(content=u.content, id=u.id) for u in free],
        max_tokens=state.limit - 3 - state.unit_cost(units[0]),
        token_counter=lambda msgs: sum(state.unit_cost(state.unit(m.id)) for m in msgs),
        strategy="last",
    )
    assert [m.id for m in direct] == kept


def test_the_demo_runs_every_available_peer_and_names_the_extra_of_the_others(monkeypatch):
    from ctxsim.lab import demo
    from ctxsim.policies import list_policies, peers

    monkeypatch.setitem(peers.NEEDS_EXTRA, "langchain-trim", (lambda: False, "peers", "langchain-core"))
    run, skipped = demo.demo_peers()
    assert "peer:langchain-trim" not in run
    assert skipped == ["peer:langchain-trim skipped: it needs the extra 'peers' (pip install 'ctxsim[peers]')"]
    assert sorted(run + ["peer:langchain-trim"]) == sorted(p for p in list_policies() if p.startswith("peer:"))
    assert demo.demo_policies("learned")[-len(run):] == run
